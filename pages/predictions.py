"""Predictions: every (model, task) cell by each method, errors, and exports."""

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from pages import shared
from pkps_core import views
from pkps_core.kernels import RESPONSE_KERNELS
from pkps_core.predict import METHODS
from pkps_core.records import RecordsError

DEFAULT_METHODS = ("sample", "dkps", "pkps")

st.title("Predictions")
path, version = shared.require_data()
cells = shared.load_cells(path, version)
models = sorted(cells["model"].unique())
available = list(METHODS)

defaults = {
    "methods": [m for m in DEFAULT_METHODS if m in available],
    "targets": [],
    "holdout": "family",
    "bandwidth": "cv",
    "response_kernel": "linear",
}
settings = st.session_state.setdefault("prediction_settings", defaults)
with st.form("prediction_form"):
    top = st.columns([3, 3, 1, 1, 1])
    methods = top[0].multiselect("Methods", available, default=settings["methods"])
    targets = top[1].multiselect(
        "Targets (models predicted as new: their cells never serve as references)",
        models,
        default=[t for t in settings["targets"] if t in models],
    )
    holdout = top[2].radio(
        "Holdout",
        ["family", "model"],
        index=["family", "model"].index(settings["holdout"]),
        help="family: no model of the cell's family is a reference (the papers' protocol)",
    )
    bandwidth = top[3].radio(
        "Bandwidth", ["cv", "median"], index=["cv", "median"].index(settings["bandwidth"])
    )
    response_kernel = top[4].selectbox(
        "Response kernel",
        RESPONSE_KERNELS,
        index=list(RESPONSE_KERNELS).index(settings["response_kernel"]),
    )
    if st.form_submit_button("Predict", type="primary"):
        settings = {
            "methods": methods,
            "targets": targets,
            "holdout": holdout,
            "bandwidth": bandwidth,
            "response_kernel": response_kernel,
        }
        st.session_state["prediction_settings"] = settings

if not settings["methods"]:
    st.info("Choose at least one method and press Predict.")
    st.stop()

key = (
    path,
    version,
    settings["holdout"],
    tuple(sorted(settings["targets"])),
    settings["bandwidth"],
    settings["response_kernel"],
)
frames = []
with st.status("Predicting…", expanded=False) as status:
    progress = st.progress(0.0)
    for done, method in enumerate(settings["methods"], start=1):
        status.update(label=f"Predicting with {method} ({done}/{len(settings['methods'])})…")
        try:
            frames.append(shared.predict_method(*key, method))
        except (RecordsError, ValueError) as exc:
            status.update(label=f"{method} failed", state="error", expanded=True)
            shared.alert("error", "A method could not run.", f"{method}: {exc}")
            st.stop()
        progress.progress(done / len(settings["methods"]))
    status.update(
        label=f"Predictions: {len(settings['methods'])} method(s), {len(models)} models × "
        f"{cells['task'].nunique()} tasks (cached for these settings)",
        state="complete",
    )
predictions = views.prediction_export(pd.concat(frames, ignore_index=True))
evaluated = settings["targets"] or None

# ---------------------------------------------------------------------- errors
st.header("Error against references")
scope = "the target models' cells" if evaluated else "all cells"
st.caption(
    f"Mean absolute error of the prediction against each cell's reference score, over {scope} "
    "with both."
)
mae = views.mae_table(predictions, evaluated)
st.dataframe(
    mae, width="stretch", column_config={"MAE": st.column_config.NumberColumn(format="%.4f")}
)

scored = predictions.dropna(subset=["prediction", "reference_score"])
if evaluated:
    scored = scored[scored["model"].isin(evaluated)]
if len(scored):
    st.subheader("Predicted vs reference")
    figure = px.scatter(
        scored,
        x="reference_score",
        y="prediction",
        facet_col="method",
        facet_col_wrap=4,
        hover_data=["model", "task", "sample_score", "n_responses"],
        opacity=0.7,
    )
    low = float(min(scored["reference_score"].min(), scored["prediction"].min()))
    high = float(max(scored["reference_score"].max(), scored["prediction"].max()))
    figure.add_shape(
        type="line",
        x0=low,
        y0=low,
        x1=high,
        y1=high,
        row="all",
        col="all",
        line={"dash": "dash", "color": "grey"},
    )
    figure.for_each_annotation(lambda a: a.update(text=a.text.removeprefix("method=")))
    rows = -(-scored["method"].nunique() // 4)
    figure.update_layout(height=320 * rows, margin={"t": 30})
    st.plotly_chart(figure, width="stretch", key="predicted_vs_true")

    st.subheader("Per task")
    by_task = views.per_task_mae(predictions, evaluated)
    st.dataframe(by_task, width="stretch")
    long = by_task.reset_index().melt(id_vars="task", var_name="method", value_name="MAE")
    bars = go.Figure(
        [
            go.Bar(name=method, x=group["task"], y=group["MAE"])
            for method, group in long.groupby("method", sort=False)
        ]
    )
    bars.update_layout(barmode="group", height=320, yaxis_title="MAE", margin={"t": 20})
    st.plotly_chart(bars, width="stretch", key="per_task_bars")
else:
    st.info("No cell has both a prediction and a reference score, so there is no error to show.")

# ---------------------------------------------------------------------- cells
st.header("Cells")
wide = predictions.pivot_table(
    index=["model", "task"], columns="method", values="prediction", dropna=False, sort=True
).reindex(columns=settings["methods"])
cell_info = predictions.drop_duplicates(["model", "task"]).set_index(["model", "task"])[
    ["sample_score", "n_responses", "reference_score"]
]
table = cell_info.join(wide).reset_index()
chosen_models = st.multiselect("Show models", models, key="cell_models")
if chosen_models:
    table = table[table["model"].isin(chosen_models)]
st.dataframe(table, hide_index=True, width="stretch")

# ---------------------------------------------------------------------- export
st.header("Export")
st.caption("The same columns as `python -m pkps_core predict`: " + ", ".join(predictions.columns))
buttons = st.columns(3)
buttons[0].download_button(
    "Predictions (CSV)",
    views.export_bytes(predictions, "csv"),
    file_name="predictions.csv",
    mime="text/csv",
)
buttons[1].download_button(
    "Predictions (Parquet)",
    views.export_bytes(predictions, "parquet"),
    file_name="predictions.parquet",
    mime="application/vnd.apache.parquet",
)
buttons[2].download_button(
    "Model coordinates (CSV)",
    # Generated on click: the coordinates need both spaces fitted.
    lambda: views.export_bytes(shared.prediction_coordinates(*key), "csv"),
    file_name="coordinates.csv",
    mime="text/csv",
)
