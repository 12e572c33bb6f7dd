"""The completed leaderboard: every model × task cell of a store, observed or predicted.

Leaderboards are sparse: few models answered every task. :func:`build_leaderboard` fills
the whole table from a store's records, and says of each cell how it was obtained:

- **observed** — the cell's full-task score is known: every query of the task (the
  distinct queries the store holds for it) was answered and scored, or the cell carries a
  trusted ``reference_score``. Its interval has zero width.
- **estimated** — some of the task's queries were answered: its scored responses stay as
  observed and the task's other queries are predicted (or, from the fitted predictor, the
  new-model ensemble predicts the full-task score from the model's own responses).
- **predicted** — none answered: predicted from the model's other tasks.

What fills them (:func:`fill_method`): on a store where fewer than half the cells are
observed — every model thin, no reference with a full score — and the scores are graded,
an additive model of the store's scored responses on the logit scale
(:mod:`pkps_core.leaderboard_logit`: ability per model, difficulty per task, bootstrap
intervals); otherwise the store's fitted reference predictor (:mod:`pkps_core.predictor`),
each model with a cell not observed placed as new, its own stored rows hidden
(:meth:`~pkps_core.predictor.ReferencePredictor.predict`), one model per call: the
predictor hides every renamed model of a call from all models of that call, and even a
family placed together (its models never inform each other under the family holdout) gets
other intervals than its models placed alone (the tests show 0.02 on a synthetic store),
so each cell is what the New model page shows for it.

Per model, the overall score is the query-weighted mean of its cells, as the New model
page defines it (:func:`pkps_core.views.new_model.weighted_mean` with
:func:`pkps_core.trust.cells.task_query_counts`); its interval is the query-weighted mean
of the cells' ends (every task at its end at once), and the rank interval comes from
:func:`pkps_core.views.new_model.rank_interval` against the other models' overall scores.
The measured quality on a sparse store is in ``docs/results/leaderboard.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pkps_core.leaderboard_logit import SOURCE as LOGIT_SOURCE
from pkps_core.leaderboard_logit import logit_cells
from pkps_core.records import RecordsError, cell_table
from pkps_core.trust.cells import task_query_counts
from pkps_core.views.new_model import independent_interval, rank_interval, weighted_mean

__all__ = [
    "CELL_COLUMNS",
    "KINDS",
    "LEVEL",
    "MODEL_COLUMNS",
    "Leaderboard",
    "build_leaderboard",
    "cell_kinds",
    "fill_method",
    "stored_leaderboard",
]

LEVEL = 0.9
FIT_KIND = "leaderboard"
STATE_VERSION = 3
THIN_STORE = 0.5  # below this share of observed cells, no reference holds a full score
KINDS = ("observed", "estimated", "predicted")
KIND_WORDS = {
    "observed": "observed: every query of the task answered and scored (or a given full score)",
    "estimated": "estimated: some queries answered; the full-task score is predicted",
    "predicted": "predicted: no query answered; completed from the model's other tasks",
}
# How a score's kind is marked after it in the page's table and cell map ("0.50 ~").
KIND_MARK = {"observed": "", "estimated": " ~", "predicted": " ?"}
CELL_COLUMNS = (
    "model",
    "family",
    "task",
    "kind",
    "value",
    "lower",
    "upper",
    "n_responses",
    "n_scored",
    "task_queries",
    "sample_score",
    "note",
)
TEXT_COLUMNS = ("model", "family", "task", "kind", "note")
MODEL_INTEGERS = (
    "rank",
    "rank_lower",
    "rank_upper",
    "n_responses",
    "tasks_observed",
    "tasks_estimated",
    "tasks_predicted",
)
NUMBER_COLUMNS = (
    "value",
    "lower",
    "upper",
    "n_responses",
    "n_scored",
    "task_queries",
    "sample_score",
)
MODEL_COLUMNS = (
    "rank",
    "model",
    "family",
    "overall",
    "lower",
    "upper",
    "rank_lower",
    "rank_upper",
    "observed_fraction",
    "lower_independent",
    "upper_independent",
    "n_responses",
    "tasks_observed",
    "tasks_estimated",
    "tasks_predicted",
)


@dataclass
class Leaderboard:
    """The completed model × task table of a store.

    Attributes
    ----------
    cells : DataFrame
        One row per (model, task) with :data:`CELL_COLUMNS`: ``kind`` one of
        :data:`KINDS`, ``value`` the full-task score (observed, or the ensemble's
        prediction), ``lower`` / ``upper`` its interval at ``level`` (equal to ``value``
        where observed), ``task_queries`` the task's distinct queries in the store (the
        cell's weight in the overall score).
    models : DataFrame
        One row per model with :data:`MODEL_COLUMNS`, best first: ``overall`` the
        query-weighted mean of its cells, ``lower`` / ``upper`` the query-weighted means of
        their ends, ``rank`` (1 = best) among all models, ``rank_lower`` / ``rank_upper``
        the best and worst rank its interval allows against the others' overall scores,
        ``observed_fraction`` the share of its overall score's queries that it answered
        and had scored (a cell with a given full score counts whole),
        ``lower_independent`` / ``upper_independent`` the narrower interval if its tasks'
        errors were independent (:func:`~pkps_core.views.new_model.independent_interval`).
    tasks : list of str
    level : float
    source : str
        What filled the cells that are not observed (the fitted predictor, or nothing
        when every cell is observed).
    elapsed : float
        Seconds the table took.
    """

    cells: pd.DataFrame
    models: pd.DataFrame
    tasks: list[str]
    level: float
    source: str
    elapsed: float = field(default=0.0)

    def wide(self) -> pd.DataFrame:
        """One row per model, best first: :data:`MODEL_COLUMNS`, then per task its value,
        kind, lower and upper (columns ``TASK``, ``TASK kind``, ``TASK lower``,
        ``TASK upper``; a task named like a model column is prefixed ``task ``)."""
        out = self.models.copy()
        grid = self.cells.set_index(["model", "task"])
        columns = {}
        for task in self.tasks:
            part = grid.xs(task, level="task").reindex(out["model"])
            name = task_column(task)
            columns[name] = part["value"].to_numpy(dtype=float)
            columns[f"{name} kind"] = part["kind"].to_numpy(dtype=object)
            columns[f"{name} lower"] = part["lower"].to_numpy(dtype=float)
            columns[f"{name} upper"] = part["upper"].to_numpy(dtype=float)
        extra = pd.DataFrame(columns, index=out.index)
        kinds = [c for c in columns if c.endswith(" kind")]
        extra[kinds] = extra[kinds].astype(object)  # pandas 3 would make them strings
        return pd.concat([out, extra], axis=1)


def task_column(task: str) -> str:
    """The wide table's column of ``task``: its name, prefixed ``task `` when it would
    clash with a model column or another task's derived column."""
    clashes = set(MODEL_COLUMNS)
    if task in clashes or task.endswith((" kind", " lower", " upper")):
        return f"task {task}"
    return task


def cell_kinds(records: pd.DataFrame) -> pd.DataFrame:
    """Every (model, task) of ``records`` with its kind, before any prediction.

    Returns one row per (model, task) of the full grid: ``model, family, task, kind,
    n_responses, n_scored, task_queries, sample_score, reference_score``. ``kind`` is
    ``observed`` where the cell has a given ``reference_score`` or its scored responses
    cover every query of the task, ``estimated`` where it has responses, else
    ``predicted``.
    """
    if not len(records):
        raise RecordsError("the store holds no responses; import a cache on the Data page")
    cells = cell_table(records)
    queries = task_query_counts(records)
    models = np.sort(records["model"].astype(str).unique())
    tasks = np.sort(records["task"].astype(str).unique())
    family = records.groupby("model", sort=True)["family"].first()
    grid = pd.MultiIndex.from_product([models, tasks], names=["model", "task"]).to_frame(
        index=False
    )
    frame = grid.merge(
        cells[["model", "task", "n_responses", "n_scored", "sample_score", "reference_score"]],
        on=["model", "task"],
        how="left",
    )
    frame["family"] = frame["model"].map(family).astype(str)
    frame["task_queries"] = frame["task"].map(queries).astype(int)
    frame["n_responses"] = frame["n_responses"].fillna(0).astype(int)
    frame["n_scored"] = frame["n_scored"].fillna(0).astype(int)
    given = frame["reference_score"].notna().to_numpy()
    complete = (frame["n_scored"] >= frame["task_queries"]).to_numpy()
    answered = (frame["n_responses"] > 0).to_numpy()
    frame["kind"] = np.where(
        given | complete, "observed", np.where(answered, "estimated", "predicted")
    )
    return frame[
        ["model", "family", "task", "kind", "n_responses", "n_scored", "task_queries"]
        + ["sample_score", "reference_score"]
    ]


def fill_method(cells: pd.DataFrame, records: pd.DataFrame, fill: str = "auto") -> str:
    """``logit`` or ``predictor``: what fills the cells of :func:`cell_kinds` that are not
    observed. ``auto``: the additive logit model (:mod:`pkps_core.leaderboard_logit`) when
    fewer than half the cells are observed — the predictor's references are then thin, and
    its calibration rehearses shadows against them — and the scores are graded (some
    strictly between 0 and 1: the scale the logit model reads); else the fitted predictor
    (``docs/results/leaderboard.md`` has both measured)."""
    if fill not in ("auto", "logit", "predictor"):
        raise ValueError(f"fill must be auto, logit or predictor; got {fill!r}")
    if fill != "auto":
        return fill
    thin = (cells["kind"] == "observed").mean() < THIN_STORE
    score = records["score"] if "score" in records.columns else pd.Series(dtype=float)
    graded = bool(((score > 0) & (score < 1)).any())
    return "logit" if thin and graded else "predictor"


def _placed(
    predictor,
    records: pd.DataFrame,
    models: list[str],
    level: float,
    progress: Callable[[float, str], None] | None,
) -> pd.DataFrame:
    """The predictor's rows (model, task, prediction, lower, upper, note) for ``models``,
    each placed as new on its own, its stored rows hidden (one call per model: the
    predictor hides every renamed model of a call from all models of that call)."""
    chosen = records[records["model"].isin(models)]
    # the profiles the fit lacks (one per model that answered only some tasks), side by side
    predictor.calibrate(
        chosen,
        progress=None
        if progress is None
        else lambda fraction, message: progress(0.8 * fraction, message),
    )
    frames = []
    for k, model in enumerate(models):
        if progress is not None:
            progress(0.8 + 0.2 * k / len(models), f"placing {model}")
        frames.append(predictor.predict(records[records["model"] == model], level=level))
    if progress is not None:
        progress(1.0, "placed")
    out = pd.concat(frames, ignore_index=True)
    return out[["model", "task", "prediction", "lower", "upper", "note"]]


def build_leaderboard(
    records: pd.DataFrame,
    predictor=None,
    *,
    level: float = LEVEL,
    progress: Callable[[float, str], None] | None = None,
    fill: str = "auto",
) -> Leaderboard:
    """The completed leaderboard of ``records`` (a store's, with embeddings).

    Parameters
    ----------
    records : DataFrame
        Canonical records, embedded like the predictor's references
        (:meth:`pkps_core.store.Store.records` gives both).
    predictor : ReferencePredictor, optional
        Fitted on ``records`` (:func:`pkps_core.predictor.stored_predictor`). Needed when
        the predictor fills the cells not observed, and for models without a scored
        response under the logit fill (without it their cells stay empty).
    level : float, default=0.9
        Coverage of the intervals.
    progress : callable, optional
        ``progress(fraction, message)`` while models are placed.
    fill : {"auto", "logit", "predictor"}, default="auto"
        What fills the cells not observed (:func:`fill_method`).

    Returns
    -------
    Leaderboard

    Raises
    ------
    RecordsError
        No records, or cells to predict without a predictor.
    """
    started = time.perf_counter()
    cells = cell_kinds(records)
    observed = (cells["kind"] == "observed").to_numpy()
    full = cells["reference_score"].where(cells["reference_score"].notna(), cells["sample_score"])
    cells["value"] = full.where(observed)
    cells["lower"] = cells["value"]
    cells["upper"] = cells["value"]
    cells["note"] = np.where(observed, "observed", "")
    open_cells = ~observed
    source = "every cell observed"
    if open_cells.any() and fill_method(cells, records, fill) == "logit":
        filled = logit_cells(records, cells, open_cells, level)
        for column in ("value", "lower", "upper", "note"):
            cells[column] = np.where(open_cells, filled[column], cells[column])
        source = LOGIT_SOURCE
        open_cells = open_cells & filled["value"].isna().to_numpy()
        if predictor is None:  # models without a scored response stay empty
            open_cells[:] = False
    to_place = sorted(cells.loc[open_cells, "model"].unique())
    if to_place:
        if predictor is None:
            raise RecordsError(
                f"{len(to_place)} model(s) have cells that are not observed; the leaderboard "
                "needs the store's fitted predictor (`python -m pkps_core fit --db STORE`)"
            )
        placed = _placed(predictor, records, to_place, level, progress)
        placed = placed.set_index(["model", "task"])
        keys = pd.MultiIndex.from_frame(cells[["model", "task"]])
        for column, target in (("prediction", "value"), ("lower", "lower"), ("upper", "upper")):
            values = placed[column].reindex(keys).to_numpy(dtype=float)
            cells[target] = np.where(open_cells, values, cells[target])
        notes = placed["note"].reindex(keys).fillna("").astype(str).to_numpy()
        cells["note"] = np.where(open_cells, notes, cells["note"])
        source = "the store's fitted predictor" + (
            "" if source.startswith("every") else f" and {source}"
        )
    cells = cells[list(CELL_COLUMNS)].reset_index(drop=True)
    models = _model_rows(cells, level)
    return Leaderboard(
        cells=cells,
        models=models,
        tasks=sorted(cells["task"].unique()),
        level=level,
        source=source,
        elapsed=time.perf_counter() - started,
    )


def _model_rows(cells: pd.DataFrame, level: float) -> pd.DataFrame:
    """Per model: the overall score with its intervals, the fraction observed, the counts
    of each kind; then ranks against the other models' overall scores."""
    rows = []
    for model, part in cells.groupby("model", sort=True):
        weights = part["task_queries"]
        observed = part["kind"] == "observed"
        answered = np.where(observed, part["task_queries"], part["n_scored"]).clip(
            max=part["task_queries"]
        )
        tasks = part.rename(columns={"value": "prediction"})
        row = {
            "model": model,
            "family": part["family"].iloc[0],
            "overall": weighted_mean(part["value"], weights),
            "lower": weighted_mean(part["lower"], weights),
            "upper": weighted_mean(part["upper"], weights),
            "observed_fraction": float(answered.sum() / weights.sum()),
            "n_responses": int(part["n_responses"].sum()),
            **{f"tasks_{kind}": int((part["kind"] == kind).sum()) for kind in KINDS},
        }
        row |= independent_interval(tasks, level)
        rows.append(row)
    frame = pd.DataFrame(rows)
    overall = frame["overall"].to_numpy(dtype=float)
    ranks = []
    for i, row in enumerate(frame.itertuples()):
        others = np.delete(overall, i)
        ranks.append(rank_interval(row.overall, row.lower, row.upper, others))
    frame["rank"] = [r["rank"] for r in ranks]
    frame["rank_lower"] = [r["best"] for r in ranks]
    frame["rank_upper"] = [r["worst"] for r in ranks]
    frame = frame.sort_values(["rank", "model"], kind="stable").reset_index(drop=True)
    return frame[list(MODEL_COLUMNS)]


def _state_key(level: float, params: dict) -> str:
    from pkps_core.predictor import ReferencePredictor
    from pkps_core.store.fits import fit_key

    settings = ReferencePredictor(**params).settings()
    return fit_key(FIT_KIND, {"predictor": settings, "level": level, "version": STATE_VERSION})


MODEL_TEXT = ("model", "family")


def _to_arrays(board: Leaderboard) -> dict[str, np.ndarray]:
    """The cells and the model rows (kept too: a read then skips the intervals' work)."""
    cells, models = board.cells, board.models
    arrays = {c: cells[c].astype(str).to_numpy(dtype=str) for c in TEXT_COLUMNS}
    arrays |= {c: cells[c].to_numpy(dtype=float) for c in NUMBER_COLUMNS}
    for column in MODEL_COLUMNS:
        kind = str if column in MODEL_TEXT else float
        arrays[f"models {column}"] = models[column].astype(kind).to_numpy(dtype=kind)
    return arrays


def _from_arrays(arrays: dict, document: dict) -> Leaderboard:
    cells = pd.DataFrame({c: arrays[c].astype(object) for c in TEXT_COLUMNS})
    for column in NUMBER_COLUMNS:
        cells[column] = arrays[column]
    for column in ("n_responses", "n_scored", "task_queries"):
        cells[column] = cells[column].astype(int)
    cells = cells[list(CELL_COLUMNS)]
    level = float(document["level"])
    models = pd.DataFrame({c: arrays[f"models {c}"] for c in MODEL_COLUMNS})
    for column in MODEL_INTEGERS:
        models[column] = models[column].astype(int)
    return Leaderboard(
        cells=cells,
        models=models,
        tasks=sorted(cells["task"].unique()),
        level=level,
        source=str(document["source"]),
        elapsed=float(document["elapsed"]),
    )


def stored_leaderboard(
    store,
    *,
    compute: bool = True,
    refresh: bool = False,
    level: float = LEVEL,
    records: pd.DataFrame | None = None,
    predictor=None,
    progress: Callable[[float, str], None] | None = None,
    store_version: int | None = None,
    **params,
) -> Leaderboard | None:
    """The store's leaderboard: read when one is kept for the store's current version,
    else built (:func:`build_leaderboard` with the store's fitted predictor) and kept.

    Parameters
    ----------
    store : pkps_core.store.Store
    compute : bool, default=True
        False: return None instead of building a missing or stale one.
    refresh : bool, default=False
        True: build and keep it even when a current one is kept (after a refit).
    level : float, default=0.9
    records : DataFrame, optional
        ``store.records()`` when the caller has them.
    predictor : ReferencePredictor, optional
        The store's fitted predictor when the caller has it; else it is read when it fills
        the cells (:func:`fill_method`; :func:`~pkps_core.predictor.stored_predictor` with
        ``fit="never"``: a store without a current fit raises
        :class:`~pkps_core.predictor.StaleFit`).
    progress : callable, optional
        ``progress(fraction, message)`` while models are placed.
    store_version : int, optional
        The store's version when ``records`` were read (default: read before them).
    **params
        :class:`~pkps_core.predictor.ReferencePredictor` parameters (``holdout``,
        ``random_state``, ...) of the fit to use; the kept table is keyed by them.
    """
    from pkps_core.predictor import stored_predictor
    from pkps_core.store.fits import embedders_digest, load_fit, save_fit

    key = _state_key(level, params)
    found = None if refresh else load_fit(store, key)  # current as fit_status says it
    current = found is not None and found.store_version == store.version
    if current and found.embedders == embedders_digest(store):
        return _from_arrays(found.arrays, found.document)
    if not compute:
        return None
    version = store.version if store_version is None else store_version
    records = store.records() if records is None else records
    digest = embedders_digest(store)  # the embedders the records were embedded with
    kinds = cell_kinds(records)
    needs_predictor = (kinds["kind"] != "observed").any() and fill_method(
        kinds, records
    ) == "predictor"
    if needs_predictor and predictor is None:
        predictor = stored_predictor(store, fit="never", records=records, **params)
    board = build_leaderboard(records, predictor, level=level, progress=progress)
    if not store.read_only:
        document = {"level": level, "source": board.source, "elapsed": board.elapsed}
        save_fit(store, key, document, _to_arrays(board), version, embedders=digest)
    return board
