"""Perspective space: PKPS next to DKPS, coloured by a task's score, with neighbours."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import app_shared as shared
from pkps_core import views
from pkps_core.records import RecordsError
from pkps_core.space import BANDWIDTH_GRID, RESPONSE_KERNELS

MAX_SELECTED = 5

st.title("Perspective space")
path, version = shared.require_data()
cells = shared.load_cells(path, version)
tasks = sorted(cells["task"].unique())

controls = st.columns([1, 2, 1, 1, 1, 1])
query_kernel = controls[0].radio(
    "Query kernel",
    ["rbf", "delta"],
    format_func={"rbf": "RBF (PKPS)", "delta": "delta (= DKPS)"}.get,
    key="query_kernel",
)
cross_validate = controls[1].toggle(
    "Cross-validate the bandwidth", value=True, disabled=query_kernel == "delta", key="cv"
)
multiple = controls[1].select_slider(
    "Bandwidth (× median query distance)",
    options=[0.0, *BANDWIDTH_GRID],
    value=0.3,
    format_func=lambda m: "0 (delta limit)" if m == 0 else f"{m:g} ×",
    disabled=cross_validate or query_kernel == "delta",
    key="bandwidth",
)
response_kernel = controls[2].selectbox("Response kernel", RESPONSE_KERNELS, key="response_kernel")
n_components = controls[3].number_input("MDS dimension d", 2, 32, 8, key="n_components")
colour_task = controls[4].selectbox("Colour by task", tasks, key="colour_task")
view = controls[5].radio("2-D view", ["MDS axes 1–2", "UMAP"], key="view")

bandwidth = "cv" if cross_validate or query_kernel == "delta" else float(multiple)
settings = (query_kernel, response_kernel, bandwidth, int(n_components))
dkps_settings = ("delta", response_kernel, "cv", int(n_components))
try:
    left = shared.fit_space(path, version, *settings)
    right = shared.fit_space(path, version, *dkps_settings)
except (RecordsError, ValueError) as exc:
    shared.alert("error", "The perspective space cannot be fitted on this store.", str(exc))
    st.stop()

if query_kernel == "rbf":
    st.caption(
        f"Query bandwidth σ = {left.query_bandwidth:.4g} "
        f"({left.query_bandwidth / left.median_query_distance:.3g} × the median query distance "
        f"{left.median_query_distance:.4g}; 0 is the delta limit) · kernel sums: "
        f"{left.affinity_path}"
    )
if query_kernel == "rbf" and cross_validate:
    with st.expander("Cross-validation error by bandwidth", expanded=False):
        curve = left.cv_curve()
        figure = go.Figure(
            go.Scatter(
                x=curve["multiple_of_median"],
                y=curve["cv_error"],
                mode="lines+markers",
                hovertemplate="%{x:g} × median: error %{y:.4f}<extra></extra>",
            )
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
        figure.update_xaxes(type="log", title="bandwidth (× median; the delta limit is not shown)")
        figure.update_yaxes(title="leave-one-model-out KNN MAE")
        figure.update_layout(height=300, showlegend=False, margin={"t": 20})
        st.plotly_chart(figure, width="stretch", key="cv_curve")
        st.dataframe(
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
frames = {
    "left": views.scatter_frame(left, cells, colour_task, xy_left),
    "right": views.scatter_frame(right, cells, colour_task, xy_right),
}
scores = pd.concat([f["score"] for f in frames.values()])
cmin, cmax = (scores.min(), scores.max()) if scores.notna().any() else (0.0, 1.0)


def scatter(frame: pd.DataFrame, axis_label: str) -> go.Figure:
    """Models as points coloured by score (grey: no responses in the task)."""
    custom = frame[["model", "family", "score", "sample_score", "task_responses", "responses"]]
    hover = (
        "<b>%{customdata[0]}</b><br>family %{customdata[1]}<br>"
        f"score in {colour_task} %{{customdata[2]:.3f}}"
        " (sample %{customdata[3]:.3f})<br>responses in task %{customdata[4]}"
        " · in all %{customdata[5]}<extra></extra>"
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
            hovertemplate="<b>%{customdata[0]}</b><br>family %{customdata[1]}<br>"
            f"no responses in {colour_task}<extra></extra>",
            name=f"not in {colour_task}",
        )
    )
    figure.update_layout(
        coloraxis={
            "cmin": cmin,
            "cmax": cmax,
            "colorscale": "Viridis",
            "colorbar": {"title": {"text": "score"}},
        },
        height=480,
        margin={"t": 10, "l": 10, "r": 10},
        legend={"orientation": "h", "y": -0.15},
        dragmode="lasso",
    )
    figure.update_xaxes(title=f"{axis_label} 1")
    figure.update_yaxes(title=f"{axis_label} 2")
    return figure


axis_label = "UMAP" if xy_left is not None else "MDS"
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
st.dataframe(neighbours, hide_index=True, width="stretch")

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
st.dataframe(examples, hide_index=True, width="stretch")
