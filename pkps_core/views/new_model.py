"""The New model page's report: one model predicted as new against the store's references.

:func:`new_model_report` runs the new-model protocol's choice — the stacked ``ensemble``
with the references' shadows (:func:`pkps_core.predict.build_context` with ``targets``) —
for one target and gathers what the page, the CLI's ``report`` command and the exports
show: per-task predictions with intervals, the query-weighted overall score, the rank
among the references with its interval, the nearest references in PKPS, the warnings in
words, and what to evaluate next. An uploaded file's model is made the target of such a
run by :mod:`pkps_core.views.uploaded_model`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy.special import ndtri  # the normal quantile; scipy.stats takes 0.5 s to import

from pkps_core.predict import TargetRun, build_context, predict
from pkps_core.records import RecordsError
from pkps_core.trust import next_cells, reason_words, task_query_counts
from pkps_core.views.space import nearest_neighbours, similar_query_responses

METHOD = "ensemble"
LEVEL = 0.9
TASK_COLUMNS = (
    "task",
    "task_queries",
    "n_responses",
    "sample_score",
    "prediction",
    "lower",
    "upper",
    "reference_score",
    "extrapolation",
    "extrapolation_reason",
    "note",
)


@dataclass
class NewModelReport:
    """Everything the New model page shows about one target model.

    Attributes
    ----------
    model : str
    method : str
        The method whose predictions and intervals these are (``"ensemble"``).
    level : float
        Coverage level of the intervals.
    holdout : str
    tasks : DataFrame
        One row per task with :data:`TASK_COLUMNS` (``task_queries``: the task's distinct
        queries, the weight of the overall score).
    overall : dict
        ``prediction``, ``lower``, ``upper`` (query-weighted means over the predicted
        tasks), ``sample_score`` (query-weighted mean over the scored tasks, NaN if none),
        ``reference_score`` (where every task has one), ``lower_independent`` and
        ``upper_independent`` (:func:`independent_interval`), ``tasks_predicted``, ``tasks``,
        ``length_score`` (how many SDs longer it answers than the references on the same
        queries; NaN without response texts) and the references' ``length_low`` and
        ``length_high`` of it.
    rank : dict
        ``rank`` (1 = best) of the predicted overall among the references, ``best`` and
        ``worst`` (the ranks of the interval's upper and lower end), ``best_independent``
        and ``worst_independent`` (of :func:`independent_interval`'s), ``references``.
    standings : DataFrame
        The references' overall scores and the model's prediction, best first: ``rank,
        model, family, overall, filled_tasks, role``.
    neighbours : DataFrame
        The nearest references in PKPS: ``rank, neighbour, family, distance, overall``.
    responses : DataFrame
        :func:`~pkps_core.views.space.similar_query_responses` for the nearest three.
    scatter : DataFrame
        ``model, family, x, y, overall, role`` (the first two PKPS MDS axes).
    warnings : list of str
        Extrapolation warnings in words, one per warned task (and one for the overall).
    next_cells : DataFrame
        What to evaluate next: ``rank, task, n_responses, task_queries, prediction,
        lower, upper, width, expected_gain``, the fewest responses first
        (:func:`~pkps_core.trust.next_cells`: the queries spread evenly over the tasks);
        ``expected_gain`` is the width one more query is expected to remove from the cell.
    weights : DataFrame
        The ensemble's stacking weights (one row per pattern of applicable members).
    elapsed : float
        Seconds the prediction took.
    computed_at : float
        When the report was made (``time.time()``): a page that reads it from a cache can
        tell whether this run computed it.
    """

    model: str
    method: str
    level: float
    holdout: str
    tasks: pd.DataFrame
    overall: dict
    rank: dict
    standings: pd.DataFrame
    neighbours: pd.DataFrame
    responses: pd.DataFrame
    scatter: pd.DataFrame
    warnings: list[str]
    next_cells: pd.DataFrame
    weights: pd.DataFrame
    elapsed: float = field(default=0.0)
    computed_at: float = field(default_factory=time.time)

    def rows(self) -> pd.DataFrame:
        """The per-task rows: the report's CSV (the overall is :meth:`overall_rows`, a
        table of its own, so a reader never averages it in with the tasks)."""
        return self.tasks.assign(model=self.model, method=self.method)[
            ["model", "method", *TASK_COLUMNS]
        ]

    def overall_rows(self) -> pd.DataFrame:
        """The overall score in one row: query-weighted means over the tasks, the rank and
        its interval (the report's second CSV)."""
        overall = {
            "model": self.model,
            "method": self.method,
            "tasks_predicted": self.overall["tasks_predicted"],
            "tasks": self.overall["tasks"],
            "task_queries": int(self.tasks["task_queries"].sum()),
            "n_responses": int(self.tasks["n_responses"].sum()),
            **{k: self.overall[k] for k in ("sample_score", "prediction", "lower", "upper")},
            "reference_score": self.overall["reference_score"],
            "rank": self.rank["rank"],
            "rank_best": self.rank["best"],
            "rank_worst": self.rank["worst"],
            "ranked_among": self.rank["references"] + 1,
            "level": self.level,
            "holdout": self.holdout,
            "averaging": "query-weighted mean over the predicted tasks",
        }
        return pd.DataFrame([overall])


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """Weighted mean over the finite values (NaN when none is)."""
    usable = np.isfinite(values.to_numpy(dtype=float))
    if not usable.any():
        return float("nan")
    v = values.to_numpy(dtype=float)[usable]
    w = weights.to_numpy(dtype=float)[usable]
    return float(np.sum(v * w) / np.sum(w))


def rank_interval(
    prediction: float, lower: float, upper: float, references: np.ndarray
) -> dict[str, int]:
    """Rank of ``prediction`` among reference scores (1 = best) and the ranks of the
    interval's ends: ``best`` from ``upper``, ``worst`` from ``lower``."""
    references = np.asarray(references, dtype=float)
    references = references[np.isfinite(references)]

    def rank_of(value: float) -> int:
        return int(1 + np.sum(references > value)) if np.isfinite(value) else 0

    return {
        "rank": rank_of(prediction),
        "best": rank_of(upper),
        "worst": rank_of(lower),
        "references": len(references),
    }


def independent_interval(tasks: pd.DataFrame, level: float = LEVEL) -> dict[str, float]:
    """The overall score's interval if the tasks' errors were independent and normal.

    Each task's interval is read as ``prediction ± z · σ_t`` (``z`` the two-sided normal
    quantile of ``level``, σ_t from its mean half-width); the overall's σ is
    ``sqrt(Σ w_t² σ_t²) / Σ w_t`` over the predicted tasks (w_t: queries). Narrower than
    the query-weighted mean of the ends (every task at its end at once); errors of one
    model's tasks are correlated, so the truth lies between the two.
    """
    z = float(ndtri(0.5 + level / 2.0))
    usable = tasks.dropna(subset=["prediction", "lower", "upper"])
    if not len(usable):
        return {"lower_independent": float("nan"), "upper_independent": float("nan")}
    w = usable["task_queries"].to_numpy(dtype=float)
    sigma = (usable["upper"] - usable["lower"]).to_numpy(dtype=float) / (2.0 * z)
    centre = float(np.sum(w * usable["prediction"].to_numpy(dtype=float)) / w.sum())
    half = z * float(np.sqrt(np.sum(w**2 * sigma**2)) / w.sum())
    return {"lower_independent": centre - half, "upper_independent": centre + half}


def expected_gain(frame: pd.DataFrame) -> pd.Series:
    """The interval width one more evaluated query is expected to remove from each cell.

    An observed cell with n responses: ``width · (1 − sqrt(n / (n + 1)))``, the width
    shrinking like a standard error. A missing cell: its width minus the median width of
    the model's observed cells (a first response moves it to the observed regime), at
    least 0. Both are estimates from this run's intervals, not refits.
    """
    width = frame["upper"] - frame["lower"]
    n = frame["n_responses"].astype(float)
    observed_width = width[n > 0].median() if (n > 0).any() else np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = width * (1.0 - np.sqrt(n / (n + 1.0)))
    missing = (width - observed_width).clip(lower=0.0)
    return observed.where(n > 0, missing).rename("expected_gain")


def warning_sentences(tasks: pd.DataFrame) -> list[str]:
    """One short sentence per warned task, from its ``extrapolation_reason``."""
    out = []
    for row in tasks[tasks["extrapolation"].astype(bool)].itertuples():
        reason = str(row.extrapolation_reason)
        said = ["it " + part if part != reason else part for part in reason_words(reason)]
        out.append(f"Task {row.task}: " + "; ".join(said) + ".")
    return out


def new_model_report(
    records: pd.DataFrame,
    model: str,
    *,
    holdout: str = "family",
    level: float = LEVEL,
    space_params: dict | None = None,
    n_neighbours: int = 5,
) -> NewModelReport:
    """Predict ``model`` as a new model (a target) from the other models' references.

    Parameters
    ----------
    records : DataFrame
        Canonical records holding ``model`` and the references.
    model : str
    holdout : {"family", "model"}, default="family"
        ``family`` (the new-model protocol's): no model of its family is a reference.
    level : float, default=0.9
    space_params : dict, optional
        :class:`~pkps_core.space.PerspectiveSpace` parameters.
    n_neighbours : int, default=5

    Raises
    ------
    RecordsError
        ``model`` is not in the records, or no other model can serve as a reference.
    """
    started = time.perf_counter()
    if model not in set(records["model"].astype(str)):
        raise RecordsError(f"unknown model {model!r}; it is not in the records")
    context = build_context(records, holdout=holdout, targets=[model], space_params=space_params)
    run = TargetRun.of(context, predict(context, [METHOD], intervals=level))
    return _assemble(run, model, holdout, level, n_neighbours, started)


def thinned_store_model(
    records: pd.DataFrame, model: str, budget: int | None, *, seed: int = 0
) -> tuple[pd.DataFrame, list[str]]:
    """A store model thinned to ``budget`` responses per task (None: all it has), to be
    predicted as new and judged on the rest (:func:`pkps_core.protocols.masks.mask_targets`).

    Returns the records (every other model's as they were) and :func:`unjudged_tasks`:
    where nothing is hidden and no ``reference_score`` is given, nothing judges the
    prediction (:func:`without_truth_on` blanks them in a report whose truth comes from
    elsewhere, such as a fitted predictor's references).
    """
    from pkps_core.protocols.masks import mask_targets

    if model not in set(records["model"].astype(str)):
        raise RecordsError(f"unknown model {model!r}; it is not in the records")
    unjudged = unjudged_tasks(records, model, budget)
    if budget is None:
        return records, unjudged
    return mask_targets(records, [model], budget, seed=seed), unjudged


def unjudged_tasks(records: pd.DataFrame, model: str, budget: int | None = None) -> list[str]:
    """The tasks where nothing can judge ``model``'s prediction: the records give no
    ``reference_score`` for its cell and it has at most ``budget`` responses there (any
    number without a budget: every response is used), so its only score there is the
    data the prediction read."""
    own = records.loc[records["model"].astype(str) == model]
    if "reference_score" in own:
        own = own[own.groupby("task")["reference_score"].transform("count") == 0]
    counts = own.groupby("task").size()
    if budget is not None:
        counts = counts[counts <= int(budget)]
    return sorted(map(str, counts.index))


def without_truth_on(report: NewModelReport, tasks) -> NewModelReport:
    """``report`` with no ``reference_score`` on ``tasks`` (and so none overall): where
    the prediction used every response the model has, its score there is no truth."""
    tasks = set(map(str, tasks))
    if not tasks:
        return report
    rows = report.tasks.copy()
    rows.loc[rows["task"].astype(str).isin(tasks), "reference_score"] = np.nan
    overall = dict(report.overall)
    if rows["reference_score"].isna().any():
        overall["reference_score"] = float("nan")
    return replace(report, tasks=rows, overall=overall)


def _assemble(
    run: TargetRun,
    model: str,
    holdout: str,
    level: float,
    n_neighbours: int,
    started: float,
    hide: str | None = None,
) -> NewModelReport:
    """The report's parts from a run (``hide``: a reference of the run the model itself
    is, never shown as its neighbour or competitor)."""
    predictions = run.predictions
    queries = task_query_counts(run.records)
    own = predictions[predictions["model"] == model].join(queries, on="task")
    tasks = own.loc[:, list(TASK_COLUMNS)].reset_index(drop=True)
    weights = tasks["task_queries"]
    overall = {key: weighted_mean(tasks[key], weights) for key in ("prediction", "lower", "upper")}
    overall["sample_score"] = weighted_mean(tasks["sample_score"], weights)
    references = tasks["reference_score"]
    overall["reference_score"] = (
        weighted_mean(references, weights) if references.notna().all() else float("nan")
    )
    overall |= independent_interval(tasks, level)
    overall["tasks_predicted"] = int(tasks["prediction"].notna().sum())
    overall["tasks"] = len(tasks)
    overall |= _length_summary(run, model)

    standings = _reference_standings(run, queries, model)
    if hide is not None and hide != model:
        standings = standings[standings["model"] != hide]
    scores = standings.loc[standings["role"] == "reference", "overall"].to_numpy()
    rank = rank_interval(overall["prediction"], overall["lower"], overall["upper"], scores)
    independent = rank_interval(
        overall["prediction"], overall["lower_independent"], overall["upper_independent"], scores
    )
    rank |= {"best_independent": independent["best"], "worst_independent": independent["worst"]}
    row = {"model": model, "family": run.families[list(run.models).index(model)]}
    row |= {"overall": overall["prediction"], "filled_tasks": 0, "role": "new model"}
    standings = pd.concat([standings, pd.DataFrame([row])], ignore_index=True)
    standings = standings.sort_values(["overall", "role"], ascending=[False, True], kind="stable")
    standings.insert(0, "rank", np.arange(1, len(standings) + 1))

    real = ~run.shadows & (run.models != hide if hide != model else True)
    models = run.models[real]
    distance = run.distances[np.ix_(real, real)]
    coordinates = run.coordinates[real]
    near = nearest_neighbours(distance, models, [model], k=n_neighbours, coordinates=coordinates)
    family = dict(zip(run.models, run.families, strict=True))
    by_model = standings.set_index("model")["overall"]
    near = near.drop(columns="model").assign(
        family=lambda f: f["neighbour"].map(family), overall=lambda f: f["neighbour"].map(by_model)
    )[["rank", "neighbour", "family", "distance", "overall"]]
    responses = similar_query_responses(
        run.responses, model, near["neighbour"].head(3).tolist(), n=2
    )
    scatter = pd.DataFrame(
        {
            "model": models,
            "family": run.families[real],
            "x": coordinates[:, 0],
            "y": coordinates[:, 1] if coordinates.shape[1] > 1 else 0.0,
        }
    )
    scatter["overall"] = scatter["model"].map(by_model)
    scatter["role"] = np.where(scatter["model"] == model, "new model", "reference")

    warnings = warning_sentences(tasks)
    if rank["references"] and np.isfinite(overall["prediction"]) and rank["best"] == 1:
        top = scores.max()
        if np.isfinite(overall["sample_score"]) and overall["sample_score"] > top:
            warnings.insert(
                0,
                f"Its sample score ({overall['sample_score']:.3f}) is above every reference's "
                f"overall score (best {top:.3f}): the prediction extrapolates.",
            )
    ranking = next_cells(predictions, model, method=METHOD, top=None, task_queries=queries)
    ranking = ranking.assign(expected_gain=expected_gain(ranking).to_numpy())
    ranking = ranking[
        ["rank", "task", "n_responses", "task_queries", "prediction", "lower", "upper", "width"]
        + ["expected_gain"]
    ].reset_index(drop=True)
    return NewModelReport(
        model=model,
        method=METHOD,
        level=level,
        holdout=holdout,
        tasks=tasks,
        overall=overall,
        rank=rank,
        standings=standings.reset_index(drop=True),
        neighbours=near.reset_index(drop=True),
        responses=responses,
        scatter=scatter,
        warnings=warnings,
        next_cells=ranking,
        weights=run.weights,
        elapsed=time.perf_counter() - started,
    )


def run_status(report: NewModelReport, started: float, *, placed: bool) -> str:
    """What this run did, for the page's status: computed now (and how) or read from the
    cache (``started``: the ``time.time()`` before the page asked for the report)."""
    how = "placed by the store's fitted predictor" if placed else "refitted"
    if report.computed_at < started:
        return f"Shown from the cache (computed earlier in {report.elapsed:.1f} s, {how})"
    return f"Predicted in {report.elapsed:.1f} s ({how})"


def length_sentence(overall: dict) -> str:
    """The length score in words, for the page (``overall`` from :class:`NewModelReport`)."""
    z, low, high = overall["length_score"], overall["length_low"], overall["length_high"]
    where = ""
    if np.isfinite(low) and np.isfinite(high):
        if z > high:
            where = " — longer than every reference's"
        elif z < low:
            where = " — shorter than every reference's"
        else:
            where = f" (the references' own range: {low:+.2f} to {high:+.2f})"
    direction = "longer" if z >= 0 else "shorter"
    return (
        f"Answer length: its answers are on average {abs(z):.2f} standard deviations "
        f"{direction} (in log characters) than the references' answers to the same "
        f"queries{where}. Judges often favour long answers; the ensemble can weigh this in "
        "through pkps-length (PKPS corrected for the length gap to its neighbours), so it "
        "counts before any judge has run."
    )


def _length_summary(run: TargetRun, model: str) -> dict:
    """The model's length score (how many SDs longer it answers than the references on
    the same queries: :attr:`~pkps_core.predict.TargetRun.length_scores`) and the
    references' range of it (``length_score``, ``length_low``, ``length_high``; NaN without
    texts)."""
    z = run.length_scores
    references = ~run.shadows & ~run.targets & np.isfinite(z)
    own = z[np.flatnonzero(run.models == model)[0]]
    if not references.any():
        return {"length_score": own, "length_low": np.nan, "length_high": np.nan}
    low, high = float(z[references].min()), float(z[references].max())
    return {"length_score": float(own), "length_low": low, "length_high": high}


def _reference_standings(run: TargetRun, queries, model) -> pd.DataFrame:
    """Each reference's query-weighted overall: its references per task, its prediction
    where a task has none (counted in ``filled_tasks``)."""
    cells = run.cells[["model", "task", "reference"]]  # cell_table of the records
    predictions = run.predictions
    own = predictions[predictions["method"] == METHOD][["model", "task", "prediction"]]
    references = run.models[~run.targets]
    grid = pd.MultiIndex.from_product([references, run.tasks], names=["model", "task"])
    frame = grid.to_frame(index=False).merge(own, on=["model", "task"], how="left")
    frame = frame.merge(cells, on=["model", "task"], how="left").join(queries, on="task")
    frame = frame[frame["model"] != model]
    filled = frame["reference"].isna()
    frame["value"] = frame["reference"].where(~filled, frame["prediction"])
    frame["filled"] = filled & frame["prediction"].notna()
    rows = []
    family = dict(zip(run.models, run.families, strict=True))
    for name, part in frame.groupby("model", sort=True):
        rows.append(
            {
                "model": name,
                "family": family[name],
                "overall": weighted_mean(part["value"], part["task_queries"]),
                "filled_tasks": int(part["filled"].sum()),
                "role": "reference",
            }
        )
    return pd.DataFrame(rows, columns=["model", "family", "overall", "filled_tasks", "role"])
