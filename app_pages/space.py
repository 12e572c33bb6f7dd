"""Perspective space: PKPS next to DKPS, coloured by a task's score, with neighbours."""

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import app_shared as shared
from pkps_core import views
from pkps_core.records import RecordsError
from pkps_core.space import BANDWIDTH_GRID, RESPONSE_KERNEL_CHOICES, RESPONSE_KERNEL_NOTE

MAX_SELECTED = 5

st.title("Perspective space")
path, version = shared.require_data()
cells = shared.load_cells(path, version)
tasks = sorted(cells["task"].unique())

controls = st.columns([1, 2, 1, 1, 1, 1])
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
colour_task = controls[4].selectbox("Colour by task", tasks, key="colour_task")
view = controls[5].radio("2-D view", ["MDS axes 1–2", "UMAP"], key="view")
shared.keep_in_url("query_kernel", "response_kernel")

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
        BANDWIDTH_LABEL
        + (" — chosen by cross-validation" if query_kernel == "rbf" else " — delta kernel"),
        options=BANDWIDTH_OPTIONS,
        format_func=bandwidth_text,
        disabled=True,
        key="bandwidth_shown",
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


# A box / lasso selection moves into the model picker below (changing a chart's figure
# resets its selection), so the selection is kept, editable, and highlighted in both panels.
new_from_charts = views.selected_models(
    chart_selection("pkps_scatter"), chart_selection("dkps_scatter")
)
if new_from_charts:
    st.session_state["picked_models"] = views.merge_selection(
        st.session_state.get("picked_models", []), new_from_charts, left.models
    )
highlight = list(st.session_state.get("picked_models", []))[:MAX_SELECTED]
frames = {
    "left": views.scatter_frame(left, cells, colour_task, xy_left),
    "right": views.scatter_frame(right, cells, colour_task, xy_right),
}
scores = pd.concat([f["score"] for f in frames.values()])
cmin, cmax = (scores.min(), scores.max()) if scores.notna().any() else (0.0, 1.0)
colour_title = views.colour_label(cells, colour_task)
score_kind = colour_title.split("<br>")[-1]


def scatter(frame: pd.DataFrame, axis_label: str) -> go.Figure:
    """Models as points coloured by score (grey: no responses in the task)."""
    frame = frame.assign(
        model_text=frame["model"].map(views.plotly_text),
        family_text=frame["family"].map(views.plotly_text),
    )
    custom = frame[
        ["model", "family", "score", "sample_score", "task_responses", "responses"]
        + ["model_text", "family_text"]
    ]
    task_text = views.plotly_text(colour_task)
    hover = (
        "<b>%{customdata[6]}</b><br>family %{customdata[7]}<br>"
        f"{score_kind} in {task_text} %{{customdata[2]:.3f}}"
        " (sample %{customdata[3]:.3f})<br>responses in task %{customdata[4]}"
        " · in all %{customdata[5]}<br>"
        f"{axis_label} 1 %{{x:.3f}}, {axis_label} 2 %{{y:.3f}}<extra></extra>"
    )
    present = frame["score"].notna()
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=frame.loc[present, "x"],
            y=frame.loc[present, "y"],
            mode="markers",
            marker={
                "color": frame.loc[present, "score"],
                "coloraxis": "coloraxis",
                "size": 10,
                "line": {"width": 0.5, "color": "white"},
            },
            customdata=custom[present].to_numpy(dtype=object).tolist(),
            hovertemplate=hover,
            name="scored",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=frame.loc[~present, "x"],
            y=frame.loc[~present, "y"],
            mode="markers",
            marker={"color": "#b0b0b0", "size": 8, "symbol": "circle-open"},
            customdata=custom[~present].to_numpy(dtype=object).tolist(),
            hovertemplate="<b>%{customdata[6]}</b><br>family %{customdata[7]}<br>"
            f"no responses in {task_text}<extra></extra>",
            name=f"not in {task_text}",
        )
    )
    chosen = frame[frame["model"].isin(highlight)]
    if len(chosen):
        figure.add_trace(
            go.Scatter(
                x=chosen["x"],
                y=chosen["y"],
                mode="markers",  # names in text (not drawn: close points would overlap)
                marker={
                    "size": 18,
                    "symbol": "circle-open",
                    "color": "#d62728",
                    "line": {"width": 2.5, "color": "#d62728"},
                },
                text=chosen["model_text"],
                hoverinfo="skip",
                name="selected",
            )
        )
    figure.update_layout(
        coloraxis={
            "cmin": cmin,
            "cmax": cmax,
            "colorscale": "Viridis",
            "colorbar": {"title": {"text": colour_title}},
        },
        height=480,
        margin={"t": 10, "l": 10, "r": 10},
        legend={"orientation": "h", "y": -0.15},
        dragmode="lasso",
    )
    figure.update_xaxes(title=f"{axis_label} axis 1 ({axis_unit})")
    figure.update_yaxes(title=f"{axis_label} axis 2 ({axis_unit})")
    return figure


axis_label = "UMAP" if xy_left is not None else "MDS"
# MDS keeps the perspective space's distances; UMAP keeps neighbourhoods, not distances
axis_unit = "arbitrary units" if xy_left is not None else "perspective-space distance"
left_title = "PKPS" if query_kernel == "rbf" else "Delta query kernel (same as DKPS)"
panels = st.columns(2)
with panels[0]:
    st.subheader(left_title)
    left_event = st.plotly_chart(
        scatter(frames["left"], axis_label),
        width="stretch",
        on_select="rerun",
        selection_mode=("box", "lasso"),
        key="pkps_scatter",
    )
with panels[1]:
    st.subheader("DKPS")
    right_event = st.plotly_chart(
        scatter(frames["right"], axis_label),
        width="stretch",
        on_select="rerun",
        selection_mode=("box", "lasso"),
        key="dkps_scatter",
    )
    # below the chart, so the two panels stay aligned
    pairing_note = views.dkps_pairing_note(shared.load_pairedness(path, version, None))
    if pairing_note:
        st.warning(pairing_note, icon=":material/warning:")
coordinates = views.coordinates_export({"pkps": left, "dkps": right})
st.download_button(
    "Download these coordinates (CSV)",
    views.export_bytes(coordinates, "csv"),
    file_name="coordinates.csv",
    mime="text/csv",
)

# ---------------------------------------------------------------------- selection
st.header("Selected models")
from_charts = views.selected_models(left_event.selection, right_event.selection)
picked = st.multiselect(
    "Select points with the box or lasso tool above, or pick models here",
    list(left.models),
    key="picked_models",
)
selected = list(dict.fromkeys([*from_charts, *picked]))
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
