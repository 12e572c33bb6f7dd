"""Perspective space: PKPS and DKPS aligned on one picture, how much they agree and why,
with neighbours and responses of the selected models."""

import time

import numpy as np
import streamlit as st

from perspective_app import shared
from pkps_core import views
from pkps_core.outputs import table_bytes
from pkps_core.records import RecordsError
from pkps_core.space import BANDWIDTH_GRID, RESPONSE_KERNEL_CHOICES, RESPONSE_KERNEL_NOTE
from pkps_core.views import comparison
from pkps_core.views.comparison_figure import comparison_figure
from pkps_core.views.figures import cv_curve_figure

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
shared.url_setting("space_query_kernel", ["rbf", "delta"])
shared.url_setting("space_response_kernel", RESPONSE_KERNEL_CHOICES)
query_kernel = controls[0].radio(
    "Query kernel",
    ["rbf", "delta"],
    format_func={"rbf": "RBF (PKPS)", "delta": "delta (= DKPS)"}.get,
    key="space_query_kernel",
)
cross_validate = controls[1].toggle(
    "Cross-validate the bandwidth", value=True, disabled=query_kernel == "delta", key="space_cv"
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
        key="space_bandwidth",
    )
response_kernel = controls[2].selectbox(
    "Response kernel",
    RESPONSE_KERNEL_CHOICES,
    key="space_response_kernel",
    help=RESPONSE_KERNEL_NOTE,
)
n_components = controls[3].number_input("MDS dimension d", 2, 32, 8, key="space_n_components")
view = controls[4].radio("2-D view", ["MDS axes 1–2", "UMAP"], key="space_view", horizontal=True)
shared.keep_in_url("space_query_kernel", "space_response_kernel")

looks = st.columns([1.3, 1.6, 1.5])
colour_by = looks[0].selectbox(
    "Colour by",
    comparison.colour_options(metadata),
    key="space_colour_by",
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


def fit_both(kernel_settings):
    """The left map's fit and DKPS's with the same response kernel and d."""
    dkps = ("delta", kernel_settings[1], "cv", kernel_settings[3])
    return (
        shared.fit_space(path, version, *kernel_settings),
        shared.fit_space(path, version, *dkps),
    )


# A slow fit (the RBF response kernel on a big cache) waits for its button; until its maps
# are ready the page keeps showing the linear kernel's (the user's consent is kept per
# session, so moving the bandwidth or the colour afterwards does not ask again).
slow_key = (path, version, query_kernel, response_kernel, int(n_components))
consented = st.session_state.setdefault("space_slow_fits", set())
pending = None
offer = st.container()
try:
    if response_kernel == "rbf" and slow_key not in consented:
        cost = shared.rbf_estimate(path, version, query_kernel)
        if cost["seconds"] > shared.SLOW_FIT_SECONDS:
            pending = cost
    if pending is None:
        left, right = fit_both(settings)
    else:
        duration = views.duration_text(pending["seconds"])
        with offer:
            st.warning(
                f"The RBF response kernel compares every pair of the "
                f"{pending['responses']:,} responses ({pending['responses'] ** 2:.2g} pairs), "
                + (
                    "in one pass for every bandwidth (the cache fills its models × queries grid)"
                    if pending.get("paired")
                    else f"{pending['passes']} times (each bandwidth of the cross-validation, "
                    "and DKPS)"
                )
                + f": {duration} on this machine now (estimated from a timed sample). "
                "The maps below are the linear kernel's until the RBF fit is done."
            )
            clicked = st.button(
                f"Fit with the RBF response kernel ({duration})", key="space_fit_rbf"
            )
        left, right = fit_both((query_kernel, "linear", *settings[2:]))
except (RecordsError, ValueError) as exc:
    shared.alert("error", "The perspective space cannot be fitted on this store.", str(exc))
    st.stop()
# the maps drawn: the chosen settings, or the linear kernel's while an RBF fit waits
shown_settings = settings if pending is None else (query_kernel, "linear", *settings[2:])
dkps_settings = ("delta", shown_settings[1], "cv", int(n_components))
took = st.session_state.get("space_slow_fit_took")
if pending is None and took and took[0] == slow_key:
    offer.caption(
        f"Fitted with the RBF response kernel in {views.duration_text(took[1])} "
        f"(estimated {views.duration_text(took[2])})."
    )
if cross_validate or query_kernel == "delta":
    # disabled, showing the bandwidth in use: CV's choice, or 0 for the delta kernel
    # a keyed widget ignores value= after its first run: the state carries what was used
    st.session_state["space_bandwidth_shown"] = views.chosen_multiple(left, BANDWIDTH_OPTIONS)
    slider_slot.select_slider(
        BANDWIDTH_LABEL,
        options=BANDWIDTH_OPTIONS,
        format_func=bandwidth_text,
        disabled=True,
        help="Chosen by cross-validation (the curve below)"
        if query_kernel == "rbf"
        else "The delta kernel is the bandwidth's 0 limit",
        key="space_bandwidth_shown",
    )

xy_left = xy_right = None
if view == "UMAP":
    try:
        xy_left = shared.umap_view(path, version, *shown_settings)
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
    st.session_state["space_picked_models"] = views.merge_selection(
        st.session_state.get("space_picked_models", []), new_from_chart, left.models
    )
found = comparison.search_models(left.models, search)
highlight = list(dict.fromkeys([*found, *st.session_state.get("space_picked_models", [])]))
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
shared.download_button(
    "Download these coordinates (CSV)",
    table_bytes(comparison.shown_coordinates(compared, metadata), "csv"),
    "coordinates.csv",
    help="The 2-D view shown (DKPS aligned), with each model's overall score, family and "
    "responses.",
)
if pending is not None and clicked:
    # the linear maps stay on screen while the RBF fit runs; the rerun draws its maps
    with offer:
        fit_started = time.perf_counter()
        shared.run_with_progress(
            lambda: fit_both(settings), pending["seconds"], "Fitting the RBF response kernel…"
        )
    consented.add(slow_key)
    elapsed = time.perf_counter() - fit_started
    st.session_state["space_slow_fit_took"] = (slow_key, elapsed, pending["seconds"])
    st.rerun()

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
        note = left.delta_limit_note()
        figure = cv_curve_figure(
            left.cv_curve(),
            views.delta_limit_error(right, cells),
            ("; chosen by CV" if left.query_bandwidth == 0 else "") + (f"; {note}" if note else ""),
        )
        st.plotly_chart(figure, width="stretch", key="space_cv_curve")
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
    key="space_picked_models",
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
focus = st.selectbox("Model", selected, key="space_focus_model")
records = shared.load_records(path, version)
nearest = pkps_neighbours[pkps_neighbours["model"] == focus]["neighbour"].head(3).tolist()
examples = views.similar_query_responses(records, focus, nearest, n=2)
st.caption(
    f"The chosen model's responses next to its three nearest {left_title} neighbours' "
    "responses to the most similar queries they answered (cosine similarity of query "
    "embeddings; 1 = the same query)."
)
shared.table(examples, hide_index=True, width="stretch")
