"""New model: one model predicted as new — its scores, rank, neighbours, trust, what next."""

import time

import pandas as pd
import streamlit as st

from perspective_app import shared
from pkps_core import report as reports
from pkps_core.records import RecordsError
from pkps_core.uploads import UPLOAD_TYPES, match_store_tasks, read_uploads
from pkps_core.views.new_model import (
    LEVEL,
    NewModelReport,
    length_sentence,
    new_model_report,
    run_status,
    thinned_store_model,
    without_truth_on,
)
from pkps_core.views.placed_model import embed_like_store, placed_model_report
from pkps_core.views.predictions import export_bytes
from pkps_core.views.uploaded_model import upload_as_new, upload_target

# an upload as the cached reports key it: name, bytes, scores in percent, task mapping
UploadKey = tuple[str, bytes, bool, tuple[tuple[str, str], ...]]


# how many of a store model's responses per task the page keeps (the rest judge it)
KEEP = ["all", "1", "2", "4", "8", "16"]
KEEP_SEED = 0


def kept_records(path: str, version: int, model: str, keep: str):
    """The store's records with ``model`` thinned to ``keep`` responses per task (all:
    unchanged), and the tasks where nothing judges its prediction."""
    budget = None if keep == "all" else int(keep)
    return thinned_store_model(shared.load_records(path, version), model, budget, seed=KEEP_SEED)


@st.cache_data(max_entries=16, show_spinner=False)
def store_model_report(
    path: str, version: int, model: str, holdout: str, keep: str = "all"
) -> NewModelReport:
    records, unjudged = kept_records(path, version, model, keep)
    report = new_model_report(records, model, holdout=holdout)
    return without_truth_on(report, unjudged)


@st.cache_data(max_entries=8, show_spinner=False)
def read_upload(name: str, data: bytes, percent: bool) -> pd.DataFrame:
    return read_uploads([(name, data)], percent_scores=percent).records


def matched_upload(path: str, version: int, upload: UploadKey) -> tuple[pd.DataFrame, list[str]]:
    """The upload's rows on the store's tasks (renamed by the page's task mapping)."""
    name, data, percent, mapping = upload
    store_tasks = shared.load_cells(path, version)["task"].unique()
    return match_store_tasks(read_upload(name, data, percent), store_tasks, dict(mapping))


@st.cache_data(max_entries=8, show_spinner=False)
def uploaded_model_report(
    path: str, version: int, upload: UploadKey, holdout: str
) -> tuple[NewModelReport, list[str]]:
    # the store's vectors, and its fitted embedders for the upload's texts: nothing of the
    # store is embedded again (on AlpacaEval that refit was most of the time)
    store = shared.open_store(path)
    embedders = {kind: store.fitted_embedder(kind) for kind in ("query", "response")}
    own, notes = matched_upload(path, version, upload)
    records, model, more = upload_target(own, shared.load_records(path, version), embedders)
    return new_model_report(records, model, holdout=holdout), notes + more


@st.cache_data(max_entries=16, show_spinner=False)
def placed_store_report(
    path: str, version: int, model: str, holdout: str, keep: str = "all"
) -> NewModelReport:
    """A store model predicted from the others by the store's fitted predictor."""
    records, unjudged = kept_records(path, version, model, keep)
    predictor = shared.load_predictor(path, version, holdout)
    report = placed_model_report(predictor, records[records["model"] == model])
    # as the refit does: no truth where its full score is the data the placement read
    return without_truth_on(report, unjudged)


@st.cache_data(max_entries=8, show_spinner=False)
def placed_upload_report(
    path: str, version: int, upload: UploadKey, holdout: str
) -> tuple[NewModelReport, list[str]]:
    """An upload placed by the store's fitted predictor: its texts embedded with the
    store's embedders, nothing refitted."""
    store_models = shared.load_cells(path, version)["model"].unique()
    own, notes = matched_upload(path, version, upload)
    own, _, more = upload_as_new(own, store_models)
    own = embed_like_store(own, shared.open_store(path))
    predictor = shared.load_predictor(path, version, holdout)
    return placed_model_report(predictor, own), notes + more


def task_mapping(upload_tasks, store_tasks) -> tuple[tuple[str, str], ...]:
    """A control mapping each of the upload's tasks the store lacks to a store task (or
    leaving it out); the chosen pairs."""
    unknown = [t for t in upload_tasks if t not in set(store_tasks)]
    if not unknown:
        return ()
    leave = "(leave out)"
    pairs = []
    with st.expander(f"Map the upload's {len(unknown)} task(s) the store lacks", expanded=True):
        st.caption(
            "The references are known on the store's tasks only. Map a task whose name "
            "differs to the store's, or leave it out (its responses are then not used)."
        )
        for i, task in enumerate(unknown):
            chosen = st.selectbox(task, [leave, *store_tasks], key=f"new_model_task_map_{i}_{task}")
            if chosen != leave:
                pairs.append((task, chosen))
    return tuple(pairs)


def offer_fit(path: str, version: int, holdout: str, state: str) -> None:
    """Say that the store has no current fitted predictor, and offer to fit it."""
    why = (
        "its references changed since it was fitted"
        if state == "stale"
        else "none has been fitted for these settings"
    )
    with st.expander(
        f"Each model is refitted here ({why}); fit the store's predictor once for "
        "about-a-second answers",
        expanded=False,
    ):
        st.caption(
            "Fitting calibrates the ensemble and intervals once per budget (1, 2, 4, 8, 16, "
            "32 responses per task; scored and responses-only) and keeps it in the store; "
            "`python -m pkps_core fit --db STORE` does the same. A few minutes on tens of "
            "thousands of responses; it is redone when the references change."
        )
        if st.button("Fit the reference predictor", key="new_model_fit"):
            progress = shared.progress_bar("Fitting the reference predictor…")
            shared.fit_predictor(path, version, holdout, progress)
            st.rerun()


NUMBER = st.column_config.NumberColumn
TASK_COLUMNS = {
    "task_queries": NUMBER(
        "queries", help="Distinct queries of the task in the store: its weight in the overall score"
    ),
    "n_responses": NUMBER("responses", help="The model's responses on the task"),
    "sample_score": NUMBER("sample", format="%.3f", help="Mean of its own scored responses"),
    "prediction": NUMBER(
        "predicted", format="%.3f", help="The ensemble's predicted full-task score"
    ),
    "lower": NUMBER("lower", format="%.3f", help=f"{LEVEL:.0%} interval, lower end"),
    "upper": NUMBER("upper", format="%.3f", help=f"{LEVEL:.0%} interval, upper end"),
    "reference_score": NUMBER(
        "reference",
        format="%.3f",
        help="The cell's full-task score where something the prediction did not read gives "
        "it: the store's reference score, or the mean of all its stored scores when it keeps "
        "fewer responses than it has",
    ),
    "extrapolation": st.column_config.CheckboxColumn("warned", help="Extrapolation warning"),
    "extrapolation_reason": st.column_config.TextColumn("why warned"),
    "note": st.column_config.TextColumn("note", help="Why a prediction is missing"),
}

st.title("New model")
st.caption(
    "Predict one model as new: its cells never serve as references, and the references are "
    "re-observed at its budget (their *shadows*) to choose the bandwidth, weigh the ensemble "
    "and calibrate the intervals — the new-model protocol's setting (docs/results/new-model.md)."
)
path, version = shared.require_data()
store_models = sorted(shared.load_cells(path, version)["model"].unique())
SOURCES = ["From the store", "Upload its responses"]
# the source, the store's model and the holdout live in the URL: a reload shows this model
shared.url_setting("new_model_source", SOURCES)
shared.url_setting("new_model_pick", store_models)
shared.url_setting("new_model_holdout", ["family", "model"])
shared.url_setting("new_model_keep", KEEP)
controls = st.columns([2, 3, 1])
source = controls[0].radio("Model", SOURCES, key="new_model_source")
holdout = controls[2].radio(
    "Holdout",
    ["family", "model"],
    key="new_model_holdout",
    help="family: no model of its family is a reference (the new-model protocol's)",
)
shared.keep_in_url("new_model_source", "new_model_holdout")
notes: list[str] = []
keep = "all"
fitted = shared.predictor_status(path, holdout) == "current"
with st.status("Predicting the model as new…", expanded=False) as status:
    try:
        if source == "From the store":
            model = controls[1].selectbox("Model in the store", store_models, key="new_model_pick")
            keep = controls[1].selectbox(
                "Responses it keeps per task",
                KEEP,
                key="new_model_keep",
                format_func=lambda k: "all it has" if k == "all" else f"{k} (the rest judge it)",
                help="Predict it as if it had answered this few queries per task (drawn at "
                "random, seed 0); its other responses are hidden from the prediction and "
                "their mean is the reference it is judged against.",
            )
            shared.keep_in_url("new_model_pick", "new_model_keep")
            started, placed = time.time(), fitted
            report_of = placed_store_report if fitted else store_model_report
            result = report_of(path, version, model, holdout, keep)
        else:
            upload = controls[1].file_uploader(
                "One model's responses (CSV, Parquet or any format the Data page takes; "
                "scores optional)",
                type=list(UPLOAD_TYPES),
                key="new_model_upload",
            )
            if upload is None:
                status.update(label="Upload a file of one model's responses", state="complete")
                st.stop()
            data = upload.getvalue()
            percent = controls[1].checkbox(
                "Scores are percentages (0–100)",
                key="new_model_percent",
                help="Scores must lie in [0, 1]; a file scored in percent is refused unless "
                "this is ticked (its scores are then divided by 100).",
            )
            upload_tasks = sorted(read_upload(upload.name, data, percent)["task"].unique())
            store_tasks = sorted(shared.load_cells(path, version)["task"].unique())
            with controls[1]:
                mapping = task_mapping(upload_tasks, store_tasks)
            upload_key = (upload.name, data, percent, mapping)
            # a store whose vectors came with its data (no fitted text embedder) cannot
            # embed an upload's texts alike: those uploads are refitted with everything
            store = shared.open_store(path)
            embeddable = all(store.has_fitted_embedder(k) for k in ("query", "response"))
            placed = fitted and embeddable
            report_of = placed_upload_report if placed else uploaded_model_report
            started = time.time()
            result, notes = report_of(path, version, upload_key, holdout)
    except (RecordsError, ValueError) as exc:
        status.update(label="Cannot predict this model", state="error", expanded=True)
        shared.alert("error", "The model could not be predicted.", str(exc))
        st.stop()
    status.update(label=run_status(result, started, placed=placed), state="complete")
if not fitted:
    offer_fit(path, version, holdout, shared.predictor_status(path, holdout))

for note in notes:
    shared.alert("info", "Note on the upload:", note)
st.text(result.model)
overall, rank = result.overall, result.rank
if keep != "all":
    truth = overall["reference_score"]
    judged = (
        "the reference column judges it task by task"
        if pd.isna(truth)
        else f"its full score is {truth:.3f}, "
        f"{'inside' if overall['lower'] <= truth <= overall['upper'] else 'outside'} the "
        f"{LEVEL:.0%} interval"
    )
    st.caption(
        f"Predicted from {keep} of its responses per task, the others hidden from it; {judged}."
    )
metrics = st.columns(4)
metrics[0].metric(
    "Predicted overall",
    f"{overall['prediction']:.3f}",
    help="Mean of the per-task predictions weighted by the tasks' queries",
)
metrics[1].metric(
    f"{LEVEL:.0%} interval",
    f"{overall['lower']:.3f}–{overall['upper']:.3f}",
    help="Query-weighted mean of the tasks' interval ends (every task at its end at once: "
    f"conservative); if the tasks' errors were independent: "
    f"{overall['lower_independent']:.3f}–{overall['upper_independent']:.3f}",
)
metrics[2].metric(
    "Rank among references",
    f"{rank['rank']} of {rank['references'] + 1}",
    help=f"Interval {rank['best']}–{rank['worst']} from the overall interval's ends; "
    f"{rank['best_independent']}–{rank['worst_independent']} with independent task errors",
)
metrics[3].metric(
    "Sample score",
    "—" if pd.isna(overall["sample_score"]) else f"{overall['sample_score']:.3f}",
    help="Query-weighted mean of its own scored responses' task means (scored tasks only)",
)
st.caption(
    f"Rank interval {rank['best']}–{rank['worst']} (conservative), "
    f"{rank['best_independent']}–{rank['worst_independent']} if the tasks' errors were "
    f"independent. Method: {result.method} (stacked members, weights below), holdout "
    f"{result.holdout}; {overall['tasks_predicted']} of {overall['tasks']} tasks predicted."
)
if pd.notna(overall["length_score"]):
    st.caption(length_sentence(overall))
if result.warnings:
    shared.alert("warning", "Extrapolation warnings", "\n".join(result.warnings))
else:
    st.success("No extrapolation warning: the references vouch for every prediction.")

per_task, standing, next_tab, export = st.tabs(
    ["Per task", "Where it stands", "What to evaluate next", "Export"]
)
with per_task:
    st.plotly_chart(reports.tasks_figure(result), width="stretch", key="new_model_tasks")
    shared.table(result.tasks, hide_index=True, width="stretch", column_config=TASK_COLUMNS)
    st.caption(
        "Ensemble weights per pattern of members that apply to a cell (validated on the shadows):"
    )
    shared.table(result.weights, hide_index=True, width="stretch")
with standing:
    left, right = st.columns([3, 2])
    left.plotly_chart(reports.scatter_figure(result), width="stretch", key="new_model_scatter")
    right.caption(
        "Nearest references in PKPS (distance D; overall: their query-weighted reference score)"
    )
    with right:
        shared.table(
            result.neighbours,
            hide_index=True,
            column_config={"distance": NUMBER(format="%.3f"), "overall": NUMBER(format="%.3f")},
        )
    st.caption(
        "Their responses to the queries closest to its own (similarity: cosine of "
        "the query embeddings)"
    )
    shared.table(result.responses, hide_index=True, width="stretch")
    st.caption(
        "Standings: the references' overall scores (filled_tasks: tasks without a "
        "reference, filled by their prediction) and the model's prediction"
    )
    shared.table(
        result.standings,
        hide_index=True,
        width="stretch",
        column_config={"overall": NUMBER(format="%.3f")},
    )
with next_tab:
    st.caption(
        "Its missing or thinly observed tasks, the fewest answered queries first: spread "
        "the next queries evenly over the tasks. On AlpacaEval that gave the overall score "
        "a smaller error than sending them where the intervals are widest (docs/results/"
        "next-queries.md). expected_gain: the interval width one more query is expected to "
        "remove from the task's own interval (a standard error's shrinkage; for a missing "
        "task, its width minus that of its observed tasks)."
    )
    shared.table(
        result.next_cells,
        hide_index=True,
        width="stretch",
        column_config={
            c: NUMBER(format="%.3f")
            for c in ("prediction", "lower", "upper", "width", "expected_gain")
        },
    )
with export:
    buttons = st.columns(3)
    shared.download_button(
        "Report rows (CSV)",
        export_bytes(result.rows(), "csv"),  # formula-like cells neutralised
        "new_model_report.csv",
        where=buttons[0],
        key="new_model_csv",
        help="One row per task.",
    )
    shared.download_button(
        "Overall (CSV)",
        export_bytes(result.overall_rows(), "csv"),
        "new_model_overall.csv",
        where=buttons[2],
        key="new_model_overall_csv",
        help="The overall score, its interval and the rank, in a file of its own.",
    )
    shared.download_button(
        "Report with figures (HTML)",
        reports.report_html(result, store=shared.url_name(path)).encode(),
        "new_model_report.html",
        where=buttons[1],
        key="new_model_html",
        help="One self-contained file (plotly.js inside): it opens without internet.",
    )
    # PNGs take a few seconds (a headless Chromium draws them), so only on request; kept
    # for this report so the downloads survive reruns
    png_for = (path, version, result.model, holdout, source)
    if st.button("Make PNGs of the figures", key="new_model_make_png"):
        try:
            with st.spinner("Drawing the figures in a headless Chromium…"):
                st.session_state["new_model_pngs"] = (
                    png_for,
                    reports.report_pngs(result, store=shared.url_name(path)),
                )
        except reports.PngUnavailable as exc:
            st.session_state["new_model_pngs"] = (png_for, str(exc))
    made_for, pngs = st.session_state.get("new_model_pngs", (None, None))
    if made_for == png_for and isinstance(pngs, str):
        st.caption(f"No PNG: {pngs}.")
    elif made_for == png_for:
        images = st.columns(2)
        for column, (name, label) in zip(
            images, (("tasks", "Per-task figure (PNG)"), ("map", "PKPS map (PNG)")), strict=True
        ):
            shared.download_button(
                label,
                pngs[name],
                f"new_model_{name}.png",
                where=column,
                key=f"new_model_png_{name}",
            )
    if source != "From the store":
        st.caption(
            "The upload is not in the store. Adding it makes it a reference for "
            "every later prediction."
        )
        if st.button("Add the upload to the store", key="new_model_add"):
            # under the name it was predicted as (renamed if the store has that name)
            upload_records = matched_upload(path, version, upload_key)[0]
            upload_records = upload_records.assign(model=result.model)
            added = shared.active_store().ingest(upload_records, source=upload.name)
            st.success(f"Added {added.added} responses; the store's version is now newer.")
