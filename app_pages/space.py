"""Perspective space: PKPS and DKPS aligned on one picture, how much they agree and why,
with neighbours and responses of the selected models."""

import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st

import app_shared as shared
from pkps_core import views
from pkps_core.outputs import table_bytes
from pkps_core.records import RecordsError
from pkps_core.space import BANDWIDTH_GRID, RESPONSE_KERNEL_CHOICES, RESPONSE_KERNEL_NOTE
from pkps_core.views import comparison
from pkps_core.views.comparison_figure import comparison_figure

MAX_SELECTED = 5
CHART_KEY = "space_maps"

st.title("Perspective space")
# the comparison is the page: less space above the title keeps both maps above the fold at
# 1400×900 (Streamlit's default top padding is 6rem)
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:3rem}</style>")
path, version = shared.require_data()
cells = shared.load_cells(path, version)
metadata = comparison.model_metadata(cells)

controls = st.columns([1.1, 2.3, 1.1, 0.8, 1.2])
shared.url_setting("query_kernel", ["rbf", "delta"])
shared.url_setting("response_kernel", RESPONSE_KERNEL_CHOICES)
query_kernel = controls[0].radio(
    "Query kernel",
    ["rbf", "delta"],
    format_func={"rbf": "RBF (PKPS)", "delta": "delta (= DKPS)"}.get,
    key="query_kernel",
)
cross_validate = controls[1].toggle(
    "Cross-validate the bandwidth", value=True, disabled=query_kernel == "delta", key="cv"
)
BANDWIDTH_OPTIONS = [0.0, *BANDWIDTH_GRID]
BANDWIDTH_LABEL = "Bandwidth (× median query distance)"


def bandwidth_text(m: float) -> str:
    return "0 (delta limit)" if m == 0 else f"{m:g} ×"


slider_slot = controls[1].empty()
multiple = 0.3
if not (cross_validate or query_kernel == "delta"):
    multiple = slider_slot.select_slider(
        BANDWIDTH_LABEL,
        options=BANDWIDTH_OPTIONS,
        value=0.3,
        format_func=bandwidth_text,
        key="bandwidth",
    )
response_kernel = controls[2].selectbox(
    "Response kernel", RESPONSE_KERNEL_CHOICES, key="response_kernel", help=RESPONSE_KERNEL_NOTE
)
n_components = controls[3].number_input("MDS dimension d", 2, 32, 8, key="n_components")
view = controls[4].radio("2-D view", ["MDS axes 1–2", "UMAP"], key="view", horizontal=True)
shared.keep_in_url("query_kernel", "response_kernel")

looks = st.columns([1.3, 1.6, 1.5])
colour_by = looks[0].selectbox(
    "Colour by",
    comparison.colour_options(metadata),
    key="colour_by",
    help="Overall: the query-weighted mean of a model's task scores (each cell's reference "
    "score, else its sample score) over the tasks it answered.",
)
mode = looks[1].radio(
    "Show",
    comparison.MODES,
    key="space_mode",
    horizontal=True,
    help="Overlay: one map, a line from each model's DKPS position (open circle, aligned) "
    "to its PKPS position.",
)
search = looks[2].text_input(
    "Find a model", key="space_search", placeholder="part of a name: ringed in both maps"
)

bandwidth = "cv" if cross_validate or query_kernel == "delta" else float(multiple)
settings = (query_kernel, response_kernel, bandwidth, int(n_components))
dkps_settings = ("delta", response_kernel, "cv", int(n_components))


def fit_both():
    return (
        shared.fit_space(path, version, *settings),
        shared.fit_space(path, version, *dkps_settings),
    )


try:
    slow_key = (path, version, query_kernel, response_kernel, int(n_components))
    if response_kernel == "rbf" and not shared.slow_fit_done(slow_key):
        cost = shared.rbf_estimate(path, version, query_kernel)
        if cost["seconds"] > shared.SLOW_FIT_SECONDS:
            duration = views.duration_text(cost["seconds"])
            offer = st.empty()  # the warning and button go once the fit is done
            with offer.container():
                st.warning(
                    f"The RBF response kernel compares every pair of the "
                    f"{cost['responses']:,} responses ({cost['responses'] ** 2:.2g} pairs), "
                    f"{cost['passes']} times (each bandwidth of the cross-validation, and "
                    f"DKPS): {duration} on this machine now (estimated from a timed sample). "
                    "The linear kernel takes a fast factorised path."
                )
                clicked = st.button(f"Fit with the RBF response kernel ({duration})", key="fit_rbf")
            if not clicked:
                st.stop()
            fit_started = time.perf_counter()
            left, right = shared.run_with_progress(
                fit_both, cost["seconds"], "Fitting the RBF response kernel…", slow_key
            )
            offer.caption(
                f"Fitted with the RBF response kernel in "
                f"{views.duration_text(time.perf_counter() - fit_started)} "
                f"(estimated {duration})."
            )
        else:
            left, right = fit_both()
    else:
        left, right = fit_both()
except (RecordsError, ValueError) as exc:
    shared.alert("error", "The perspective space cannot be fitted on this store.", str(exc))
    st.stop()
if cross_validate or query_kernel == "delta":
    # disabled, showing the bandwidth in use: CV's choice, or 0 for the delta kernel
    # a keyed widget ignores value= after its first run: the state carries what was used
    st.session_state["bandwidth_shown"] = views.chosen_multiple(left, BANDWIDTH_OPTIONS)
    slider_slot.select_slider(
        BANDWIDTH_LABEL,
        options=BANDWIDTH_OPTIONS,
        format_func=bandwidth_text,
        disabled=True,
        help="Chosen by cross-validation (the curve below)"
        if query_kernel == "rbf"
        else "The delta kernel is the bandwidth's 0 limit",
        key="bandwidth_shown",
    )

xy_left = xy_right = None
if view == "UMAP":
    try:
        xy_left = shared.umap_view(path, version, *settings)
        xy_right = shared.umap_view(path, version, *dkps_settings)
    except ImportError:
        st.info(
            "UMAP needs the optional package umap-learn (pip install umap-learn); "
            "showing the first MDS axes."
        )


def chart_selection(key: str):
    state = st.session_state.get(key)
    return state.get("selection") if state else None


# A click, box or lasso selection moves into the model picker below (changing a chart's
# figure resets its selection), so the selection is kept, editable, and ringed in both maps.
new_from_chart = views.selected_models(chart_selection(CHART_KEY))
if new_from_chart:
    st.session_state["picked_models"] = views.merge_selection(
        st.session_state.get("picked_models", []), new_from_chart, left.models
    )
found = comparison.search_models(left.models, search)
highlight = list(dict.fromkeys([*found, *st.session_state.get("picked_models", [])]))
highlight = highlight[:MAX_SELECTED]

left_title = "PKPS" if query_kernel == "rbf" else "Delta query kernel (same as DKPS)"
compared = comparison.compare_spaces(left, right, xy_left, xy_right)
pairing = comparison.pairing_summary(shared.load_pairedness(path, version, None))
sentence = comparison.agreement_sentence(
    compared.agreement, pairing, same_kernel=query_kernel == "delta"
)
# above the maps, so the reader knows what to expect before looking
if np.isfinite(compared.agreement.distance_correlation) and (
    compared.agreement.distance_correlation >= 0.7
):
    st.info(sentence, icon=":material/compare_arrows:")
else:
    st.warning(sentence, icon=":material/warning:")
if search.strip() and not found:
    st.caption(f"No model name contains {search.strip()!r}.")
figure = comparison_figure(
    compared,
    metadata,
    colour_by,
    mode=mode,
    highlight=highlight,
    left_title=left_title,
    right_title="DKPS, aligned to the left map (Procrustes)",
)
event = st.plotly_chart(
    figure,
    width="stretch",
    on_select="rerun",
    selection_mode=("points", "box", "lasso"),
    key=CHART_KEY,
)
st.caption(
    f"Same axes, one colour scale: DKPS is aligned to {left_title} on their {len(compared.frame)} "
    f"models (orthogonal Procrustes with scale; MDS fixes a map only up to rotation and "
    f"reflection), which leaves {compared.alignment.disparity_:.1%} of the left map's spread "
    "unmatched. Click, box or lasso points to ring them in both maps."
    + (" UMAP keeps neighbourhoods, not distances." if compared.view == "UMAP" else "")
)
st.download_button(
    "Download these coordinates (CSV)",
    table_bytes(comparison.shown_coordinates(compared, metadata), "csv"),
    file_name="coordinates.csv",
    mime="text/csv",
    help="The 2-D view shown (DKPS aligned), with each model's overall score, family and "
    "responses.",
)

if query_kernel == "rbf":
    st.caption(
        f"Query bandwidth σ = {left.query_bandwidth:.4g} "
        f"({left.query_bandwidth / left.median_query_distance:.3g} × the median query distance "
        f"{left.median_query_distance:.4g}; 0 is the delta limit) · kernel sums: "
        f"{left.affinity_path}"
    )
st.caption(f"Response kernel: {RESPONSE_KERNEL_NOTE}")
if query_kernel == "rbf" and cross_validate:
    with st.expander("Cross-validation error by bandwidth", expanded=False):
        # the delta limit (multiple 0) has no place on a log axis: it is the dashed line
        curve = left.cv_curve().query("multiple_of_median > 0")
        figure = go.Figure(
            go.Scatter(
                x=curve["multiple_of_median"],
                y=curve["cv_error"],
                mode="lines+markers",
                name="PKPS",
                hovertemplate="%{x:.3f} × median: error %{y:.3f}<extra></extra>",
            )
        )
        delta_error = views.delta_limit_error(right, cells)
        if np.isfinite(delta_error):
            figure.add_hline(
                y=delta_error,
                line_dash="dash",
                line_color="#7f7f7f",
                annotation_text=f"δ limit (bandwidth → 0, = DKPS): {delta_error:.3f}"
                + ("; chosen by CV" if left.query_bandwidth == 0 else "")
                + (f"; {note}" if (note := left.delta_limit_note()) else ""),
                annotation_position="top left",
            )
        chosen = curve[curve["chosen"]]
        figure.add_trace(
            go.Scatter(
                x=chosen["multiple_of_median"],
                y=chosen["cv_error"],
                mode="markers",
                marker={"size": 14, "symbol": "star"},
                name="chosen",
                hoverinfo="skip",
            )
        )
        figure.update_xaxes(
            type="log",
            title="bandwidth (× median query distance, log scale)",
            tickvals=list(curve["multiple_of_median"]),
            ticktext=[f"{m:g}" for m in curve["multiple_of_median"]],
            minor={"showgrid": False, "ticks": ""},
        )
        figure.update_yaxes(title="leave-one-model-out KNN MAE (score units)")
        figure.update_layout(height=300, showlegend=False, margin={"t": 20})
        st.plotly_chart(figure, width="stretch", key="cv_curve")
        shared.table(
            left.cv_curve()[["multiple_of_median", "bandwidth", "cv_error", "chosen"]],
            hide_index=True,
        )


# ---------------------------------------------------------------------- selection
st.header("Selected models")
from_chart = views.selected_models(event.selection)
picked = st.multiselect(
    "Select points with a click, the box or the lasso above, or pick models here",
    list(left.models),
    key="picked_models",
)
selected = list(dict.fromkeys([*from_chart, *picked, *found]))
if not selected:
    st.caption("Nothing selected yet.")
    st.stop()
if len(selected) > MAX_SELECTED:
    st.caption(f"{len(selected)} models selected; showing the first {MAX_SELECTED}.")
    selected = selected[:MAX_SELECTED]

pkps_neighbours = views.nearest_neighbours(left.distance, left.models, selected, k=5)
dkps_neighbours = views.nearest_neighbours(right.distance, right.models, selected, k=5)
neighbours = pkps_neighbours.merge(
    dkps_neighbours, on=["model", "rank"], suffixes=(f" ({left_title})", " (DKPS)")
)
st.subheader("Nearest neighbours")
shared.table(neighbours, hide_index=True, width="stretch")
pairing_note = views.dkps_pairing_note(shared.load_pairedness(path, version, None))
if pairing_note:
    st.caption("DKPS neighbours: " + pairing_note)

st.subheader("Responses to similar queries")
focus = st.selectbox("Model", selected, key="focus_model")
records = shared.load_records(path, version)
nearest = pkps_neighbours[pkps_neighbours["model"] == focus]["neighbour"].head(3).tolist()
examples = views.similar_query_responses(records, focus, nearest, n=2)
st.caption(
    f"The chosen model's responses next to its three nearest {left_title} neighbours' "
    "responses to the most similar queries they answered (cosine similarity of query "
    "embeddings; 1 = the same query)."
)
shared.table(examples, hide_index=True, width="stretch")
