"""Predictions: every (model, task) cell by each method, errors, and exports."""

import time

import pandas as pd
import streamlit as st

from perspective_app import shared
from pkps_core import trust, views
from pkps_core.predict import METHODS, self_pairs_setting
from pkps_core.records import RecordsError
from pkps_core.space import RESPONSE_KERNEL_CHOICES, RESPONSE_KERNEL_NOTE
from pkps_core.views.figures import per_task_bars

DEFAULT_METHODS = ("sample", "dkps", "pkps")
INTERVAL_LEVEL = shared.INTERVAL_LEVEL
DEFAULT_BUDGET = 4  # as `predict --budget`


st.title("Predictions")
st.caption(
    "A new model's full scores can be predicted from its responses alone, before any judge "
    "has scored them: mark it as a target. With targets, every reference is also re-observed "
    "like the targets (its *shadows*), and the bandwidth, the ensemble's weights and the "
    "intervals are calibrated on those, at the targets' budget. How well that works on real "
    "data: on AlpacaEval, new models with 4 unscored responses per task get the ensemble's "
    "cell MAE 0.053 (the references' mean: 0.088) and are ranked with Spearman 0.69 (scored: "
    "0.037 and 0.74); `length` and `pkps-length` read how much longer a model answers than "
    "the references do on the same queries. Every number is in docs/results/new-model.md."
)
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
    "intervals": True,
    "budget": DEFAULT_BUDGET,
}
# The form's settings live in the URL (its widgets' keys): a reload, a second tab or a shared
# link starts from them (read on a session's first run; the form's widgets then keep them).
URL_CHOICES = {
    "pred_methods": ("methods", available),
    "pred_targets": ("targets", models),
    "pred_holdout": ("holdout", ["family", "model"]),
    "pred_bandwidth": ("bandwidth", ["cv", "median"]),
    "pred_response_kernel": ("response_kernel", RESPONSE_KERNEL_CHOICES),
    "pred_budget": ("budget", range(1, 100_001)),
    "pred_intervals": ("intervals", [True, False]),
}
if "prediction_settings" not in st.session_state:
    for url_key, (name, options) in URL_CHOICES.items():
        chosen = shared.from_url(url_key, options, many=isinstance(defaults[name], list))
        if chosen is not None:
            defaults[name] = chosen
settings = st.session_state.setdefault("prediction_settings", defaults)
# Keyed widgets keep one identity while their defaults follow the submitted settings
# (an unkeyed widget whose default changes is a new widget, and the next submit's
# edits to the old one were lost).
with st.form("pred_form"):
    # Methods and targets get half a row each: in narrower columns the chips ran past the
    # edge ("pkps" cut off) and the response kernel read "linea" (issue 19)
    top = st.columns(2)
    knobs = st.columns([1, 1, 1, 1, 2])
    methods = top[0].multiselect(
        "Methods", available, default=settings["methods"], key="pred_methods"
    )
    targets = top[1].multiselect(
        "Targets (models predicted as new: their cells never serve as references)",
        models,
        default=[t for t in settings["targets"] if t in models],
        key="pred_targets",
    )
    holdout = knobs[0].radio(
        "Holdout",
        ["family", "model"],
        index=["family", "model"].index(settings["holdout"]),
        help="family: no model of the cell's family is a reference (the papers' protocol)",
        key="pred_holdout",
    )
    bandwidth = knobs[1].radio(
        "Bandwidth",
        ["cv", "median"],
        index=["cv", "median"].index(settings["bandwidth"]),
        key="pred_bandwidth",
    )
    response_kernel = knobs[2].selectbox(
        "Response kernel",
        RESPONSE_KERNEL_CHOICES,
        index=list(RESPONSE_KERNEL_CHOICES).index(settings["response_kernel"]),
        key="pred_response_kernel",
        help=RESPONSE_KERNEL_NOTE,
    )
    budget = knobs[3].number_input(
        "Target budget",
        min_value=1,
        value=int(settings.get("budget", DEFAULT_BUDGET)),
        step=1,
        key="pred_budget",
        help="Responses each target keeps per task (drawn with a fixed seed); the rest are "
        "hidden from every method and are the truth it is judged against (the cell's "
        "full-data mean score).",
    )
    intervals = knobs[4].checkbox(
        f"{INTERVAL_LEVEL:.0%} intervals and extrapolation warnings",
        value=settings.get("intervals", True),
        help="Conformal intervals calibrated on held-out families' residuals (with targets: "
        "on the shadows' residuals, at the targets' budget); without targets it re-runs each "
        "method once per family fold, so it takes several times longer.",
        key="pred_intervals",
    )
    if st.form_submit_button("Predict", type="primary"):
        settings = {
            "methods": methods,
            "targets": targets,
            "holdout": holdout,
            "bandwidth": bandwidth,
            "response_kernel": response_kernel,
            "intervals": intervals,
            "budget": int(budget),
        }
        st.session_state["prediction_settings"] = settings
shared.keep_in_url(*URL_CHOICES)

if not settings["methods"]:
    st.info("Choose at least one method and press Predict.")
    st.stop()

key = shared.PredictionKey(
    path=path,
    version=version,
    holdout=settings["holdout"],
    targets=tuple(sorted(settings["targets"])),
    bandwidth=settings["bandwidth"],
    response_kernel=settings["response_kernel"],
    budget=int(settings.get("budget", DEFAULT_BUDGET)),
)
frames = []
started = time.time()
computed = 0
with st.status("Predicting…", expanded=False) as status:
    progress = st.progress(0.0)
    for done, method in enumerate(settings["methods"], start=1):
        status.update(label=f"Predicting with {method} ({done}/{len(settings['methods'])})…")
        try:
            frame, computed_at = shared.predict_cells(key, method, bool(settings.get("intervals")))
        except (RecordsError, ValueError) as exc:
            status.update(label=f"{method} failed", state="error", expanded=True)
            shared.alert("error", "A method could not run.", f"{method}: {exc}")
            st.stop()
        frames.append(frame)
        computed += computed_at >= started
        progress.progress(done / len(settings["methods"]))
    took = time.time() - started
    cached = len(settings["methods"]) - computed
    status.update(
        label=f"Predictions: {len(settings['methods'])} method(s), {len(models)} models × "
        f"{cells['task'].nunique()} tasks in {took:.1f} s ({computed} computed now, {cached} "
        "read from the cache of earlier runs with these settings)",
        state="complete",
    )
predictions = views.prediction_export(
    pd.concat(frames, ignore_index=True),
    targets=settings["targets"],
    settings={
        "holdout": settings["holdout"],
        "bandwidth": settings["bandwidth"],
        "response_kernel": settings["response_kernel"],
        "budget": key.budget if settings["targets"] else None,
        "seed": 0,
        "self_pairs": self_pairs_setting(None, bool(settings["targets"])),
    },
)
evaluated = settings["targets"] or None

summary_tab, task_tab, cells_tab, next_tab, export_tab = st.tabs(
    ["Summary", "Per task", "Cells", "What to evaluate next", "Export"]
)
has_intervals = predictions["lower"].notna().any()
scored = views.error_bar_frame(predictions)
if evaluated:
    scored = scored[scored["model"].isin(evaluated)]

# ---------------------------------------------------------------------- summary
with summary_tab:
    self_reference = not evaluated and views.reference_is_sample_score(cells)
    st.caption(
        views.mae_caption(self_reference=self_reference, budget=key.budget if evaluated else None)
        + (" — over the target models' cells." if evaluated else " — over all cells.")
    )
    mae = views.mae_table(predictions, evaluated, self_reference=self_reference)
    shared.table(
        mae, width="stretch", column_config={"MAE": st.column_config.NumberColumn(format="%.4f")}
    )
    notes = views.method_notes(predictions)
    if len(notes):
        st.caption("Why some methods leave cells without a prediction (the export's `note`):")
        shared.table(notes, hide_index=True, width="stretch")
    if has_intervals:
        st.caption(
            f"{INTERVAL_LEVEL:.0%} intervals: coverage of the references (share of cells whose "
            "reference lies inside), mean width, cells with an interval, and cells warned as "
            "extrapolation."
        )
        shared.table(
            views.interval_table(predictions, evaluated),
            width="stretch",
            column_config={
                "coverage": st.column_config.NumberColumn(format="%.3f"),
                "mean_width": st.column_config.NumberColumn(format="%.4f"),
            },
        )
    if len(scored):
        st.subheader("Predicted vs reference")
        shown_models = sorted(scored["model"].unique())
        highlight = None
        if has_intervals:
            choices = ["(none)", *shown_models]
            preferred = evaluated[0] if evaluated and evaluated[0] in shown_models else None
            # a keyed widget keeps its old value: follow a new set of targets explicitly
            follows = tuple(settings["targets"])
            if (
                st.session_state.get("pred_highlight_follows") != follows
                or st.session_state.get("pred_highlight") not in choices
            ):
                st.session_state["pred_highlight"] = preferred or "(none)"
            st.session_state["pred_highlight_follows"] = follows
            picked = st.selectbox(
                "Draw the intervals of one model",
                choices,
                key="pred_highlight",
                help="Every cell's interval is in its hover; drawn here for one model only.",
            )
            highlight = None if picked == "(none)" else picked
            st.caption(
                "One point per cell; hover for the model, task and interval. Orange: cells "
                "warned as extrapolation (their intervals also hold the cell's own sampling "
                "interval). Dashed: predicted = reference."
            )
        figure = views.predicted_vs_reference_figure(
            scored, highlight=highlight, level=INTERVAL_LEVEL if has_intervals else None
        )
        st.plotly_chart(figure, width="stretch", key="pred_scatter")
    else:
        st.info(
            "No cell has both a prediction and a reference score, so there is no error to show."
        )

# ---------------------------------------------------------------------- per task
with task_tab:
    by_task = views.per_task_mae(predictions, evaluated)
    if len(by_task):
        st.caption("MAE against the references per task (rows) and method (columns).")
        shared.table(by_task, width="stretch")
        st.plotly_chart(per_task_bars(by_task), width="stretch", key="pred_task_bars")
    else:
        st.info("No cell has both a prediction and a reference score.")

# ---------------------------------------------------------------------- cells
with cells_tab:
    table = views.cell_overview(predictions, settings["methods"])
    chosen_models = st.multiselect("Show models", models, key="pred_cell_models")
    if chosen_models:
        table = table[table["model"].isin(chosen_models)]
    if has_intervals:
        st.caption(
            f"Highlighted: {int(table['extrapolation'].sum())} cell(s) whose prediction "
            "extrapolates beyond the references: the model's sample score (pooled over its "
            "tasks, or the cell's own) lies beyond the references' range, or the model lies "
            "outside their region of the perspective space, or (a new model) it answers at "
            "lengths unlike every reference's. The reason column says which; warned_by, "
            "for which methods."
        )
        shown = table.style.apply(
            lambda row: ["background-color: #fde2b8" if row["extrapolation"] else ""] * len(row),
            axis=1,
        )
    else:
        shown = table
    shared.table(shown, hide_index=True, width="stretch")

# ---------------------------------------------------------------------- next
with next_tab:
    if not has_intervals:
        st.info("Tick the intervals option and press Predict: the ranking reads the intervals.")
    else:
        st.caption(
            "A model's missing or thinly observed cells, the fewest answered queries first "
            "(widest interval first among equals): spreading the next queries evenly gave "
            "new models' scores a smaller error on AlpacaEval than chasing the widest "
            "intervals (docs/results/next-queries.md)."
        )
        # follow the chosen targets: a new set of targets moves the pick to the first
        follows = tuple(settings["targets"])
        if evaluated and st.session_state.get("pred_next_model_follows") != follows:
            st.session_state["pred_next_model"] = evaluated[0]
        elif st.session_state.get("pred_next_model") not in models:
            st.session_state["pred_next_model"] = evaluated[0] if evaluated else models[0]
        st.session_state["pred_next_model_follows"] = follows
        picks = st.columns(2)
        next_target = picks[0].selectbox("Model", models, key="pred_next_model")
        with_interval = [
            m
            for m in settings["methods"]
            if predictions.loc[predictions["method"] == m, "lower"].notna().any()
        ]
        if not with_interval:
            st.info("None of the chosen methods could be calibrated on these references.")
        else:
            preferred = next((m for m in ("ensemble", "pkps") if m in with_interval), None)
            next_method = picks[1].selectbox(
                "Intervals of",
                with_interval,
                index=with_interval.index(preferred) if preferred else 0,
                key="pred_next_method",
            )
            ranking = trust.next_cells(predictions, next_target, method=next_method, top=10)
            if len(ranking):
                shared.table(ranking, hide_index=True, width="stretch")
            else:
                st.info("Every cell of this model is as observed as its task allows.")

# ---------------------------------------------------------------------- export
with export_tab:
    st.caption(
        "The same columns as `python -m pkps_core predict`: " + ", ".join(predictions.columns)
    )
    # Every file is built now and handed over as bytes under a fixed key: a download
    # generated on click ("deferred") could be gone from the media store by the time the
    # browser asked for it (MediaFileStorageError after a fresh Predict). A click does not
    # rerun the page (shared.download_button).
    coordinates = shared.prediction_coordinates(key)
    buttons = st.columns(3)
    files = (
        ("Predictions (CSV)", predictions, "predictions.csv", "pred_download_csv"),
        ("Predictions (Parquet)", predictions, "predictions.parquet", "pred_download_parquet"),
        ("Model coordinates (CSV)", coordinates, "coordinates.csv", "pred_download_coordinates"),
    )
    for column, (label, frame, name, widget_key) in zip(buttons, files, strict=True):
        shared.download_button(
            label,
            views.export_bytes(frame, name.rsplit(".", 1)[1]),
            name,
            where=column,
            key=widget_key,
        )
