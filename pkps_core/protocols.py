"""The papers' evaluation protocols as seeded, reproducible sweeps over a cache.

Four protocols, each a function of canonical records (dense enough that a cell's full-task
score is known) returning a :class:`ProtocolResult`:

* ``"query-efficiency"`` (PKPS Section 4, Figures 2–3): every observed cell is masked to a
  budget of ``m`` queries, sampled independently per model with a fraction ``rho`` from a
  pool shared by the task's models; levers cohort ``n`` (models kept) and task coverage
  ``p_task`` (cells kept observed). Every observed cell is a target in turn under family
  holdout; the truth is the cell's full-cache score.
* ``"completion"`` (PKPS Figure 4): (model, task) cells are observed with probability
  ``p_task`` and, within an observed cell, each query with probability ``p_query``; levers
  cohort ``n`` and number of tasks ``T``. The hidden cells are the targets; observed cells
  carry only the scores of their kept queries (no full-task reference), so nothing a
  method sees depends on a masked query.
* ``"interpolation"`` / ``"extrapolation"`` (second paper, "Misses the Mark"): models are
  split into sources and targets (random 75/25, or the bottom 50 % sources and top 30 %
  targets by full score), sources keep every response, targets only a core set of
  ``core_set`` queries per task shared by all targets. The error is the estimation gap
  ``|h(f) − s̄(f, D)|``; on binary tasks each target's similarity to the sources
  (agreement beyond chance, :func:`model_similarity`) is set against the normalised gap.

Every run is seeded: the same records, settings and seeds give the same long table.
Results are a long table (:data:`LONG_COLUMNS` plus the protocol's levers), a summary
(:func:`summary_table`: per seed the mean over tasks of the per-task MAE, then mean ± SEM
over seeds, the PKPS appendix "Sweeps and reporting") and Wilcoxon signed-rank tests on
per-task error differences (:func:`wilcoxon_tests`, appendix "Statistical tests").

References
----------
Helm et al., "Benchmark Prediction with Sparse and Unpaired Cached Responses" (PKPS),
Section 4 and the appendix. "How Benchmark Prediction from Fewer Data Misses the Mark":
the source–target splits, the estimation gap, model similarity and the normalised gap.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, wilcoxon

from pkps_core.itemsim import split_models
from pkps_core.predict import build_context, predict
from pkps_core.records import validate_records

PROTOCOLS = ("query-efficiency", "completion", "interpolation", "extrapolation")
DEFAULT_METHODS = {
    "query-efficiency": ("sample", "irt", "dkps", "pkps", "ensemble"),
    "completion": ("lrmc", "pkps", "ensemble"),
    "interpolation": ("sample", "rs-learn", "aipw", "pkps", "ensemble"),
    "extrapolation": ("sample", "rs-learn", "aipw", "pkps", "ensemble"),
}
LEVERS = {
    "query-efficiency": ("budget", "rho", "cohort", "p_task"),
    "completion": ("cohort", "n_tasks", "p_task", "p_query"),
    "interpolation": ("core_set",),
    "extrapolation": ("core_set",),
}
# The comparator of the Wilcoxon tests and the lever whose smallest value the tests use
# (None: every operating point is tested).
COMPARATORS = {
    "query-efficiency": ("sample", "budget"),
    "completion": ("lrmc", None),
    "interpolation": ("sample", None),
    "extrapolation": ("sample", None),
}
LONG_COLUMNS = ("method", "model", "task", "y_true", "y_pred", "abs_err")
SPLIT_COLUMNS = ("similarity", "normalised_gap")

Progress = Callable[[float, str], None]


@dataclass
class ProtocolResult:
    """What a protocol run returns.

    Attributes
    ----------
    protocol : str
    levers : tuple of str
        The lever columns of ``long`` (in sweep order).
    long : DataFrame
        One row per (seed, lever values, method, target cell): ``seed, protocol, *levers,
        method, model, task, y_true, y_pred, abs_err`` (plus ``similarity`` and
        ``normalised_gap`` for the split protocols). ``y_pred`` is NaN where a method does
        not apply (e.g. IRT on non-binary scores).
    summary : DataFrame
        :func:`summary_table` of ``long``.
    tests : DataFrame
        :func:`wilcoxon_tests` of ``long``.
    correlations : DataFrame
        :func:`similarity_correlations` (split protocols; empty otherwise).
    """

    protocol: str
    levers: tuple[str, ...]
    long: pd.DataFrame
    summary: pd.DataFrame
    tests: pd.DataFrame
    correlations: pd.DataFrame = field(default_factory=pd.DataFrame)


# ------------------------------------------------------------------------ preparation


def full_scores(records: pd.DataFrame) -> pd.Series:
    """Each cell's full-task score: its ``reference_score`` if given, else its mean score.

    Returns a Series indexed by (model, task).
    """
    cells = records.groupby(["model", "task"], sort=True)
    if "reference_score" in records.columns:
        given = cells["reference_score"].first()
        return given.fillna(cells["score"].mean()).rename("full_score")
    return cells["score"].mean().rename("full_score")


def prepare_records(records: pd.DataFrame, embedder=None) -> pd.DataFrame:
    """Validate once and embed the texts once, before any masking.

    Missing ``query_embedding`` / ``response_embedding`` columns are filled from the texts
    with :func:`pkps_core.embed.embed_records`; every masked copy then carries the same
    vectors, so a sweep embeds nothing again. Cells without a finite score are dropped
    (they have no truth to evaluate against).
    """
    frame = validate_records(records)
    if "score" not in frame.columns or frame["score"].notna().sum() == 0:
        raise ValueError("the protocols need scored responses; the input has no score column")
    if "query_embedding" not in frame.columns or "response_embedding" not in frame.columns:
        from pkps_core.embed import embed_records

        frame = embed_records(frame, embedder)
    scored = frame.groupby(["model", "task"])["score"].transform("count") > 0
    return frame[scored].reset_index(drop=True)


# ---------------------------------------------------------------------------- masking


def subsample_cells(
    records: pd.DataFrame, budget: int, *, rho: float = 0.0, random_state: int = 0
) -> pd.DataFrame:
    """Mask every (model, task) cell to ``budget`` queries: the query-efficiency protocol.

    A fraction ``rho`` of each cell's queries comes from a pool shared by all models of the
    task; the rest is sampled independently per model (so pairing is controlled). Each
    cell's ``reference_score`` is its full-cache mean score (the trusted full-task score),
    unless the input already carries one. Every other column (embeddings included) is
    carried over.
    """
    rng = np.random.default_rng(random_state)
    frame = records.copy()
    if "reference_score" not in frame.columns:
        frame["reference_score"] = frame.groupby(["model", "task"])["score"].transform("mean")
    n_shared = int(round(rho * budget))
    keep = np.zeros(len(frame), dtype=bool)
    for _, task_rows in frame.groupby("task").groups.items():
        task_frame = frame.loc[task_rows]
        queries = task_frame["query_id"].unique()
        shared = set(rng.choice(queries, size=min(n_shared, len(queries)), replace=False))
        for _, cell_rows in task_frame.groupby("model").groups.items():
            cell = frame.loc[cell_rows, "query_id"]
            in_shared = cell.isin(shared).to_numpy()
            chosen = list(np.flatnonzero(in_shared))
            private = np.flatnonzero(~in_shared)
            take = max(0, budget - len(chosen))
            chosen += list(rng.choice(private, size=min(take, len(private)), replace=False))
            keep[frame.index.get_indexer(cell.index[chosen])] = True
    return frame[keep].reset_index(drop=True)


def _keep_random(
    records: pd.DataFrame, column: str, count: int | None, minimum: int, rng: np.random.Generator
) -> pd.DataFrame:
    """Keep the rows of ``count`` values of ``column`` drawn at random (all when None)."""
    values = np.sort(records[column].unique())
    if count is None or count >= len(values):
        return records
    if count < minimum:
        raise ValueError(f"need at least {minimum} {column}(s), got {count}")
    kept = rng.choice(values, size=count, replace=False)
    return records[records[column].isin(kept)].reset_index(drop=True)


def choose_cohort(
    records: pd.DataFrame, cohort: int | None, rng: np.random.Generator
) -> pd.DataFrame:
    """Keep ``cohort`` models drawn at random (all models when None or not smaller)."""
    return _keep_random(records, "model", cohort, 2, rng)


def choose_tasks(
    records: pd.DataFrame, n_tasks: int | None, rng: np.random.Generator
) -> pd.DataFrame:
    """Keep ``n_tasks`` tasks drawn at random (all tasks when None or not smaller)."""
    return _keep_random(records, "task", n_tasks, 1, rng)


def cover_cells(cells: pd.DataFrame, p_task: float, rng: np.random.Generator) -> np.ndarray:
    """Which of ``cells`` (rows with model, task) stay observed at task coverage ``p_task``.

    Each cell is kept with probability ``p_task``; every model keeps at least one cell and
    every task at least two (when it has two), so each model stays predictable.
    """
    if not 0.0 < p_task <= 1.0:
        raise ValueError(f"p_task must be in (0, 1], got {p_task}")
    if p_task >= 1.0:
        return np.ones(len(cells), dtype=bool)
    keep = rng.random(len(cells)) < p_task
    models = cells["model"].to_numpy()
    tasks = cells["task"].to_numpy()
    for model in np.unique(models):
        rows = np.flatnonzero(models == model)
        if not keep[rows].any():
            keep[rng.choice(rows)] = True
    for task in np.unique(tasks):
        rows = np.flatnonzero(tasks == task)
        short = min(2, len(rows)) - int(keep[rows].sum())
        if short > 0:
            keep[rng.choice(rows[~keep[rows]], size=short, replace=False)] = True
    return keep


def _lookup(per_cell: pd.Series, frame: pd.DataFrame) -> np.ndarray:
    """``per_cell`` (indexed by model, task) at each row of ``frame``."""
    return per_cell.reindex(pd.MultiIndex.from_frame(frame[["model", "task"]])).to_numpy()


def _cells(records: pd.DataFrame) -> pd.DataFrame:
    return records[["model", "task"]].drop_duplicates().sort_values(["model", "task"])


def _keep_cells(records: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    index = pd.MultiIndex.from_frame(cells[["model", "task"]])
    rows = pd.MultiIndex.from_frame(records[["model", "task"]]).isin(index)
    return records[rows].reset_index(drop=True)


def mask_query_efficiency(
    records: pd.DataFrame,
    *,
    budget: int,
    rho: float = 0.0,
    cohort: int | None = None,
    p_task: float = 1.0,
    seed: int = 0,
) -> pd.DataFrame:
    """The query-efficiency cache of one seed: cohort, coverage, then budget and pairing.

    Each kept cell carries its full-task score as ``reference_score`` (what the reference
    models are trusted with); the cells dropped by the coverage are absent.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    rng = np.random.default_rng(seed)
    frame = records.assign(reference_score=_lookup(full_scores(records), records))
    frame = choose_cohort(frame, cohort, rng)
    cells = _cells(frame)
    frame = _keep_cells(frame, cells[cover_cells(cells, p_task, rng)])
    return subsample_cells(frame, budget, rho=rho, random_state=int(rng.integers(2**31)))


def mask_completion(
    records: pd.DataFrame,
    *,
    p_task: float,
    p_query: float = 1.0,
    cohort: int | None = None,
    n_tasks: int | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The completion cache of one seed and its hidden cells.

    Cohort and tasks are drawn first, then cells are observed at coverage ``p_task`` and
    each observed cell keeps each query with probability ``p_query`` (at least one).
    ``reference_score`` is dropped, so an observed cell's reference is the sample score of
    its kept queries.

    Returns
    -------
    masked : DataFrame
        The observed responses.
    hidden : DataFrame
        The (model, task) cells of the cohort and tasks that were hidden.
    """
    if not 0.0 < p_query <= 1.0:
        raise ValueError(f"p_query must be in (0, 1], got {p_query}")
    rng = np.random.default_rng(seed)
    frame = records.drop(columns=["reference_score"], errors="ignore")
    frame = choose_cohort(frame, cohort, rng)
    frame = choose_tasks(frame, n_tasks, rng)
    cells = _cells(frame)
    observed = cover_cells(cells, p_task, rng)
    frame = _keep_cells(frame, cells[observed])
    keep = rng.random(len(frame)) < p_query
    cell_id = frame.groupby(["model", "task"], sort=True).ngroup().to_numpy()
    kept_per_cell = np.bincount(cell_id, weights=keep, minlength=cell_id.max() + 1)
    for empty in np.flatnonzero(kept_per_cell == 0):
        keep[rng.choice(np.flatnonzero(cell_id == empty))] = True
    return frame[keep].reset_index(drop=True), cells[~observed].reset_index(drop=True)


def mask_split(
    records: pd.DataFrame, split: str, *, core_set: int = 50, seed: int = 0
) -> tuple[pd.DataFrame, np.ndarray]:
    """Sources keep everything, targets a shared core set per task (second paper).

    Models are split by :func:`pkps_core.itemsim.split_models` on their full score (the
    mean over tasks of the full-task scores). Per task, ``core_set`` queries (all when
    fewer) are drawn at random and shared by every target; target cells carry no
    reference.

    Returns
    -------
    masked : DataFrame
    targets : ndarray of str
    """
    if core_set < 1:
        raise ValueError(f"core_set must be at least 1, got {core_set}")
    rng = np.random.default_rng(seed)
    full = full_scores(records)
    per_model = full.groupby(level="model").mean()
    sources, targets = split_models(per_model.to_numpy(), split, rng)
    target_models = per_model.index.to_numpy()[targets]
    keep_models = set(per_model.index.to_numpy()[sources]) | set(target_models)
    frame = records[records["model"].isin(keep_models)]
    frame = frame.assign(reference_score=_lookup(full, frame))
    is_target = frame["model"].isin(target_models).to_numpy()
    keep = ~is_target
    for task in np.sort(frame["task"].unique()):
        queries = np.sort(frame.loc[frame["task"] == task, "query_id"].unique())
        core = rng.choice(queries, size=min(core_set, len(queries)), replace=False)
        keep |= is_target & (frame["task"] == task).to_numpy() & frame["query_id"].isin(core)
    frame.loc[is_target, "reference_score"] = np.nan
    frame = frame[keep].reset_index(drop=True)
    # A target with no core-set response in any task cannot be a target.
    return frame, np.sort(np.intersect1d(target_models, frame["model"].unique()))


# ------------------------------------------------------------------ model similarity


def chance_agreement(p_a: float | np.ndarray, p_b: float | np.ndarray) -> np.ndarray:
    """``c_exp = p_a p_b + (1 − p_a)(1 − p_b)``: agreement of independent Bernoullis."""
    p_a, p_b = np.asarray(p_a, dtype=float), np.asarray(p_b, dtype=float)
    return p_a * p_b + (1.0 - p_a) * (1.0 - p_b)


def agreement_beyond_chance(a: np.ndarray, b: np.ndarray) -> float:
    """``(c_obs − c_exp) / (1 − c_exp)`` of two binary score vectors on the same items.

    ``c_obs`` is the share of items where the two agree, ``c_exp`` the chance agreement of
    their accuracies (:func:`chance_agreement`). NaN when ``c_exp = 1`` (both constant and
    equal: agreement carries no information beyond chance).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError("a and b must be non-empty 1-d vectors of the same length")
    observed = float(np.mean(a == b))
    expected = float(chance_agreement(a.mean(), b.mean()))
    if np.isclose(expected, 1.0):
        return float("nan")
    return (observed - expected) / (1.0 - expected)


def model_similarity(target: np.ndarray, sources: np.ndarray) -> float:
    """S(f): mean over sources f' of the agreement beyond chance of f and f'.

    Parameters
    ----------
    target : ndarray (n_items,) of 0/1
        The target's item scores s(f, z) on a task.
    sources : ndarray (n_sources, n_items) of 0/1, NaN where a source has no score
        Each source is compared on the items both answered.

    Notes
    -----
    The second paper (following Mania et al. 2019 and Goel et al. 2025) averages the
    chance-corrected agreement ``(c_obs − c_exp) / (1 − c_exp)`` over the source models,
    with ``c_obs`` the observed and ``c_exp`` the chance agreement rate.
    """
    target = np.asarray(target, dtype=float)
    values = []
    for source in np.atleast_2d(np.asarray(sources, dtype=float)):
        both = np.isfinite(source) & np.isfinite(target)
        if both.any():
            values.append(agreement_beyond_chance(target[both], source[both]))
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def _is_binary(scores: pd.Series) -> bool:
    values = scores.dropna().to_numpy()
    return len(values) > 0 and bool(np.isin(values, (0.0, 1.0)).all())


def similarity_and_spread(
    records: pd.DataFrame, sources: Sequence[str], targets: Sequence[str]
) -> pd.DataFrame:
    """Per (target, task): similarity to the sources and the item-score spread sigma_f.

    Computed on the full records (an analysis quantity, never seen by a method).
    ``similarity`` is NaN on non-binary tasks; ``sigma`` is the standard deviation of the
    target's item scores (``sqrt(p (1 − p))`` on a binary task).
    """
    rows = []
    for task, in_task in records.groupby("task", sort=True):
        table = in_task.pivot_table(index="model", columns="query_id", values="score")
        binary = _is_binary(in_task["score"])
        source_rows = table.reindex([s for s in sources if s in table.index]).to_numpy()
        for target in targets:
            if target not in table.index:
                continue
            scores = table.loc[target].to_numpy()
            finite = scores[np.isfinite(scores)]
            similarity = model_similarity(scores, source_rows) if binary else float("nan")
            rows.append(
                {
                    "model": target,
                    "task": task,
                    "similarity": similarity,
                    "sigma": float(finite.std()) if len(finite) else float("nan"),
                }
            )
    return pd.DataFrame(rows, columns=["model", "task", "similarity", "sigma"])


# ------------------------------------------------------------------------- the sweeps


def _grid(levers: dict[str, Sequence]) -> list[dict]:
    names = list(levers)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*levers.values())]


def _evaluate(
    masked: pd.DataFrame,
    methods: Sequence[str],
    truth: pd.Series,
    cells: pd.DataFrame,
    *,
    holdout: str,
    targets: Sequence[str] | None,
    space_params: dict,
    seed: int,
) -> pd.DataFrame:
    """Predict ``masked`` and keep the rows of ``cells`` with their truth and error."""
    context = build_context(
        masked,
        holdout=holdout,
        targets=list(targets) if targets is not None else None,
        space_params={**space_params, "random_state": seed},
    )
    predictions = predict(context, methods)
    wanted = cells[["model", "task"]].assign(y_true=_lookup(truth, cells))
    frame = wanted.merge(predictions[["model", "task", "method", "prediction"]], how="inner")
    frame = frame.rename(columns={"prediction": "y_pred"})
    frame["abs_err"] = (frame["y_pred"] - frame["y_true"]).abs()
    return frame[list(LONG_COLUMNS)]


def _with_levers(frame: pd.DataFrame, protocol: str, seed: int, values: dict) -> pd.DataFrame:
    head = pd.DataFrame({"seed": seed, "protocol": protocol, **values}, index=frame.index)
    return pd.concat([head, frame], axis=1)


def _report(progress: Progress | None, done: int, total: int, message: str) -> None:
    if progress is not None:
        progress(done / total, message)


def _finish(protocol: str, levers: tuple[str, ...], parts: list[pd.DataFrame]) -> ProtocolResult:
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    sort = ["seed", *levers, "method", "model", "task"]
    long = long.sort_values(sort, kind="stable").reset_index(drop=True)
    comparator, smallest = COMPARATORS[protocol]
    correlations = similarity_correlations(long) if "similarity" in long.columns else pd.DataFrame()
    return ProtocolResult(
        protocol=protocol,
        levers=levers,
        long=long,
        summary=summary_table(long, levers),
        tests=wilcoxon_tests(long, levers, comparator=comparator, smallest=smallest),
        correlations=correlations,
    )


def query_efficiency_protocol(
    records: pd.DataFrame,
    *,
    budgets: Sequence[int] = (1, 2, 4, 8),
    rhos: Sequence[float] = (0.0,),
    cohorts: Sequence[int | None] = (None,),
    p_tasks: Sequence[float] = (1.0,),
    seeds: Sequence[int] = range(4),
    methods: Sequence[str] | None = None,
    holdout: str = "family",
    space_params: dict | None = None,
    embedder=None,
    progress: Progress | None = None,
) -> ProtocolResult:
    """Query efficiency (PKPS Figure 3a–c): MAE of every observed cell at budget m.

    The lever grid is the product of ``budgets``, ``rhos``, ``cohorts`` (None = every
    model) and ``p_tasks``; for each point and seed the records are masked by
    :func:`mask_query_efficiency` and every kept cell is predicted under ``holdout``. The
    truth is the cell's full-task score (:func:`full_scores`). The long table's ``cohort``
    is the number of models actually kept.
    """
    records = prepare_records(records, embedder)
    truth = full_scores(records)
    methods = list(methods or DEFAULT_METHODS["query-efficiency"])
    grid = _grid({"budget": budgets, "rho": rhos, "cohort": cohorts, "p_task": p_tasks})
    total, parts = len(grid) * len(seeds), []
    _report(progress, 0, total, "query-efficiency: starting")
    for step, (point, seed) in enumerate(itertools.product(grid, seeds), start=1):
        masked = mask_query_efficiency(records, seed=seed, **point)
        cells = _cells(masked)
        frame = _evaluate(
            masked,
            methods,
            truth,
            cells,
            holdout=holdout,
            targets=None,
            space_params=dict(space_params or {}),
            seed=seed,
        )
        values = {**point, "cohort": masked["model"].nunique()}
        parts.append(_with_levers(frame, "query-efficiency", seed, values))
        _report(progress, step, total, f"query-efficiency {_label(values)} seed {seed}")
    return _finish("query-efficiency", LEVERS["query-efficiency"], parts)


def completion_protocol(
    records: pd.DataFrame,
    *,
    p_tasks: Sequence[float] = (0.5,),
    p_queries: Sequence[float] = (0.5,),
    cohorts: Sequence[int | None] = (None,),
    n_tasks: Sequence[int | None] = (None,),
    seeds: Sequence[int] = range(4),
    methods: Sequence[str] | None = None,
    holdout: str = "family",
    space_params: dict | None = None,
    embedder=None,
    progress: Progress | None = None,
) -> ProtocolResult:
    """Score completion (PKPS Figure 4): MAE on the hidden cells of :func:`mask_completion`.

    The truth of a hidden cell is its full-task score in the input; the long table's
    ``cohort`` and ``n_tasks`` are the numbers actually kept.
    """
    records = prepare_records(records, embedder)
    truth = full_scores(records)
    methods = list(methods or DEFAULT_METHODS["completion"])
    grid = _grid({"cohort": cohorts, "n_tasks": n_tasks, "p_task": p_tasks, "p_query": p_queries})
    total, parts = len(grid) * len(seeds), []
    _report(progress, 0, total, "completion: starting")
    for step, (point, seed) in enumerate(itertools.product(grid, seeds), start=1):
        masked, hidden = mask_completion(records, seed=seed, **point)
        values = {
            **point,
            "cohort": pd.concat([masked["model"], hidden["model"]]).nunique(),
            "n_tasks": pd.concat([masked["task"], hidden["task"]]).nunique(),
        }
        if len(hidden):
            frame = _evaluate(
                masked,
                methods,
                truth,
                hidden,
                holdout=holdout,
                targets=None,
                space_params=dict(space_params or {}),
                seed=seed,
            )
            parts.append(_with_levers(frame, "completion", seed, values))
        _report(progress, step, total, f"completion {_label(values)} seed {seed}")
    return _finish("completion", LEVERS["completion"], parts)


def split_protocol(
    records: pd.DataFrame,
    split: str,
    *,
    core_sets: Sequence[int] = (50,),
    seeds: Sequence[int] = range(4),
    methods: Sequence[str] | None = None,
    holdout: str = "family",
    space_params: dict | None = None,
    embedder=None,
    progress: Progress | None = None,
) -> ProtocolResult:
    """Interpolation or extrapolation (second paper): estimation gap on the targets.

    Targets are passed to the methods as new models (their cells never serve as
    references); the error ``abs_err`` is the estimation gap ``|h(f) − s̄(f, D)|`` per
    (target, task). Each row also carries the target's ``similarity`` to the sources
    (binary tasks) and the ``normalised_gap`` ``abs_err / sigma_f``.
    """
    if split not in ("interpolation", "extrapolation"):
        raise ValueError(f"split must be 'interpolation' or 'extrapolation', got {split!r}")
    records = prepare_records(records, embedder)
    truth = full_scores(records)
    methods = list(methods or DEFAULT_METHODS[split])
    total, parts = len(core_sets) * len(seeds), []
    _report(progress, 0, total, f"{split}: starting")
    for step, (core_set, seed) in enumerate(itertools.product(core_sets, seeds), start=1):
        masked, targets = mask_split(records, split, core_set=core_set, seed=seed)
        cells = _cells(masked[masked["model"].isin(targets)])
        frame = _evaluate(
            masked,
            methods,
            truth,
            cells,
            holdout=holdout,
            targets=targets,
            space_params=dict(space_params or {}),
            seed=seed,
        )
        sources = np.setdiff1d(masked["model"].unique(), targets)
        spread = similarity_and_spread(records, sources, targets)
        frame = frame.merge(spread, on=["model", "task"], how="left")
        sigma = frame.pop("sigma").where(lambda s: s > 0)
        frame["normalised_gap"] = frame["abs_err"] / sigma
        parts.append(_with_levers(frame, split, seed, {"core_set": core_set}))
        _report(progress, step, total, f"{split} core set {core_set} seed {seed}")
    return _finish(split, LEVERS[split], parts)


def run_protocol(
    records: pd.DataFrame,
    protocol: str,
    *,
    budgets: Sequence[int] = (1, 2, 4, 8),
    rhos: Sequence[float] = (0.0,),
    cohorts: Sequence[int | None] = (None,),
    p_tasks: Sequence[float] | None = None,
    p_queries: Sequence[float] = (0.5,),
    n_tasks: Sequence[int | None] = (None,),
    core_sets: Sequence[int] = (50,),
    seeds: Sequence[int] = range(4),
    methods: Sequence[str] | None = None,
    holdout: str = "family",
    space_params: dict | None = None,
    embedder=None,
    progress: Progress | None = None,
) -> ProtocolResult:
    """Run ``protocol`` (one of :data:`PROTOCOLS`) with the levers that apply to it.

    ``p_tasks`` defaults to 1.0 for query efficiency and 0.5 for completion; levers that do
    not belong to the protocol are ignored.
    """
    common = {
        "seeds": seeds,
        "methods": methods,
        "holdout": holdout,
        "space_params": space_params,
        "embedder": embedder,
        "progress": progress,
    }
    if protocol == "query-efficiency":
        return query_efficiency_protocol(
            records,
            budgets=budgets,
            rhos=rhos,
            cohorts=cohorts,
            p_tasks=p_tasks or (1.0,),
            **common,
        )
    if protocol == "completion":
        return completion_protocol(
            records,
            p_tasks=p_tasks or (0.5,),
            p_queries=p_queries,
            cohorts=cohorts,
            n_tasks=n_tasks,
            **common,
        )
    if protocol in ("interpolation", "extrapolation"):
        return split_protocol(records, protocol, core_sets=core_sets, **common)
    raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")


def combine_results(protocol: str, longs: Sequence[pd.DataFrame]) -> ProtocolResult:
    """One :class:`ProtocolResult` from the long tables of separate runs (e.g. one per seed).

    Each seed's masks and fits depend only on that seed, so running seeds one at a time
    and combining gives the same result as one run over all of them.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return _finish(protocol, LEVERS[protocol], [frame for frame in longs if len(frame)])


def _label(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


# ---------------------------------------------------------------------------- reporting


def summary_table(long: pd.DataFrame, levers: Sequence[str]) -> pd.DataFrame:
    """Mean ± SEM over seeds of the per-seed mean over tasks (PKPS "Sweeps and reporting").

    Per (lever values, method, seed, task) the absolute errors are averaged over the
    target cells with a prediction; per seed those task means are averaged; the summary
    is their mean and standard error (``std(ddof=1) / sqrt(n_seeds)``) over seeds.

    Returns
    -------
    DataFrame
        Columns ``*levers, method, mae, sem, n_seeds, n_cells, coverage`` (``coverage``:
        share of target cells the method predicted). ``mae`` is NaN where a method never
        applied.
    """
    columns = [*levers, "method", "mae", "sem", "n_seeds", "n_cells", "coverage"]
    if not len(long):
        return pd.DataFrame(columns=columns)
    keys = [*levers, "method"]
    per_task = long.groupby([*keys, "seed", "task"], dropna=False)["abs_err"].mean()
    per_seed = per_task.groupby(level=[*keys, "seed"], dropna=False).mean()
    grouped = per_seed.groupby(level=keys, dropna=False)
    summary = pd.DataFrame(
        {
            "mae": grouped.mean(),
            "sem": grouped.std(ddof=1) / np.sqrt(grouped.count()),
            "n_seeds": grouped.count(),
        }
    )
    cells = long.groupby(keys, dropna=False)["abs_err"]
    summary["n_cells"] = cells.count()
    summary["coverage"] = cells.count() / cells.size()
    return summary.reset_index()[columns]


def wilcoxon_tests(
    long: pd.DataFrame,
    levers: Sequence[str],
    *,
    comparator: str,
    smallest: str | None = None,
) -> pd.DataFrame:
    """Two-sided Wilcoxon signed-rank tests of each method against ``comparator``.

    At each operating point (each combination of lever values; only the smallest value of
    the lever ``smallest`` when given, e.g. the smallest budget), the per-cell difference
    ``abs_err(method) − abs_err(comparator)`` is averaged per task over models and seeds,
    and the per-task means are tested against zero (:func:`scipy.stats.wilcoxon`). Cells
    where either method has no prediction are left out.

    Returns
    -------
    DataFrame
        Columns ``*levers, method, comparator, tasks_tested, tasks_better, mean_diff,
        statistic, p_value, frac_cells_better, n_cells``; ``mean_diff`` < 0 and
        ``frac_cells_better`` > 0.5 favour the method.
    """
    columns = [
        *levers,
        "method",
        "comparator",
        "tasks_tested",
        "tasks_better",
        "mean_diff",
        "statistic",
        "p_value",
        "frac_cells_better",
        "n_cells",
    ]
    if not len(long) or comparator not in set(long["method"]):
        return pd.DataFrame(columns=columns)
    frame = long
    if smallest is not None:
        frame = frame[frame[smallest] == frame[smallest].min()]
    cell = ["seed", *levers, "model", "task"]
    errors = frame.pivot_table(index=cell, columns="method", values="abs_err", dropna=False)
    rows = []
    for point, at_point in errors.groupby(level=list(levers), dropna=False):
        point = point if isinstance(point, tuple) else (point,)
        for method in errors.columns:
            if method == comparator:
                continue
            paired = at_point[[method, comparator]].dropna()
            if not len(paired):
                continue
            diff = paired[method] - paired[comparator]
            per_task = diff.groupby(level="task").mean()
            statistic, p_value = _wilcoxon(per_task.to_numpy())
            rows.append(
                {
                    **dict(zip(levers, point, strict=True)),
                    "method": method,
                    "comparator": comparator,
                    "tasks_tested": len(per_task),
                    "tasks_better": int((per_task < 0).sum()),
                    "mean_diff": float(diff.mean()),
                    "statistic": float(statistic),
                    "p_value": float(p_value),
                    "frac_cells_better": float((diff < 0).mean()),
                    "n_cells": len(diff),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def _wilcoxon(differences: np.ndarray) -> tuple[float, float]:
    """Two-sided signed-rank test of ``differences`` against 0; NaN when undefined."""
    if not len(differences) or np.allclose(differences, 0.0):
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        # Ties or zeros send scipy to the normal approximation, which warns on tiny n.
        warnings.simplefilter("ignore", RuntimeWarning)
        statistic, p_value = wilcoxon(differences)
    return float(statistic), float(p_value)


def similarity_correlations(long: pd.DataFrame) -> pd.DataFrame:
    """Pearson r between model similarity and normalised gap, per method (second paper).

    Pooled over seeds, targets and tasks where both are finite. Columns ``method, r,
    p_value, n``; r is NaN with fewer than three points or a constant input.
    """
    rows = []
    for method, part in long.groupby("method", sort=True):
        finite = part[["similarity", "normalised_gap"]].dropna()
        finite = finite[np.isfinite(finite).all(axis=1)]
        r = p_value = float("nan")
        if len(finite) >= 3 and finite.nunique().min() > 1:
            r, p_value = pearsonr(finite["similarity"], finite["normalised_gap"])
        rows.append({"method": method, "r": float(r), "p_value": float(p_value), "n": len(finite)})
    return pd.DataFrame(rows, columns=["method", "r", "p_value", "n"])


def format_summary(summary: pd.DataFrame, levers: Sequence[str], digits: int = 4) -> pd.DataFrame:
    """The summary as a levers × methods table of ``"mae ± sem"`` strings ("—": no value)."""
    if not len(summary):
        return pd.DataFrame()
    text = [
        "—"
        if not np.isfinite(mae)
        else f"{mae:.{digits}f} ± {0.0 if np.isnan(sem) else sem:.{digits}f}"
        for mae, sem in zip(summary["mae"], summary["sem"], strict=True)
    ]
    frame = summary.assign(text=text)
    return frame.pivot_table(
        index=list(levers), columns="method", values="text", aggfunc="first", dropna=False
    )
