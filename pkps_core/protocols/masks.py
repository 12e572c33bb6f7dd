"""Preparing a cache once and masking it per seed: the caches the protocols predict.

Each protocol's mask is a function of the prepared records and a seed:
:func:`mask_query_efficiency` (budget, pairing, cohort, coverage), :func:`mask_completion`
(hidden cells, thinned queries), :func:`mask_split` (sources and targets with a shared
core set, split by :func:`split_models`) and :func:`mask_new_model` (dense references, new
target models thinned to a budget, scored or responses-only).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pkps_core.records import RecordsError, default_family, validate_records

SPLITS = ("interpolation", "extrapolation")
NEW_MODEL_MODES = ("scored", "responses-only")


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
        from pkps_core.embed import embed_records  # here: scikit-learn takes ~1 s to import

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


def cell_values(per_cell: pd.Series, frame: pd.DataFrame) -> np.ndarray:
    """``per_cell`` (indexed by model, task) at each row of ``frame``."""
    return per_cell.reindex(pd.MultiIndex.from_frame(frame[["model", "task"]])).to_numpy()


def cells_of(records: pd.DataFrame) -> pd.DataFrame:
    """The distinct (model, task) cells of ``records``, sorted."""
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
    frame = records.assign(reference_score=cell_values(full_scores(records), records))
    frame = choose_cohort(frame, cohort, rng)
    cells = cells_of(frame)
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
    cells = cells_of(frame)
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

    Models are split by :func:`split_models` on their full score (the
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
    frame = frame.assign(reference_score=cell_values(full, frame))
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


def choose_target_families(
    families: np.ndarray, target_share: float, rng: np.random.Generator
) -> np.ndarray:
    """``round(target_share * n_families)`` distinct families (at least one) drawn at random.

    At least two families must remain as references; ValueError otherwise.
    """
    if not 0.0 < target_share < 1.0:
        raise ValueError(f"target_share must be in (0, 1), got {target_share}")
    families = np.sort(np.unique(families))
    n_targets = max(1, int(round(target_share * len(families))))
    if len(families) - n_targets < 2:
        raise ValueError(
            f"target_share {target_share} of {len(families)} families leaves "
            f"{len(families) - n_targets} reference family(ies); the new-model protocol needs "
            "at least two families of references besides the targets"
        )
    return np.sort(rng.choice(families, size=n_targets, replace=False))


def mask_new_model(
    records: pd.DataFrame,
    budget: int,
    *,
    mode: str = "scored",
    target_share: float = 0.25,
    seed: int = 0,
    targets: np.ndarray | list[str] | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """References keep everything; new target models answered ``budget`` queries per task.

    The users' situation: the reference models' caches are complete, a new model has
    answered a few queries of each task, either judged (``mode="scored"``) or not yet
    (``mode="responses-only"``: its responses and embeddings, no scores).

    Parameters
    ----------
    records : DataFrame
        Prepared records (:func:`prepare_records`); ``family`` defaults to
        :func:`pkps_core.records.default_family` of the model when the column is absent.
    budget : int
        Responses kept per target cell, drawn per model independently and without
        replacement (:func:`subsample_cells` with ``rho=0``); a cell with at most
        ``budget`` responses keeps them all.
    mode : {"scored", "responses-only"}
        In ``"responses-only"`` the targets' kept rows lose their ``score`` (NaN).
    target_share : float in (0, 1)
        Share of the families drawn as targets when ``targets`` is None (at least one
        family; at least two must remain as references). Every model of a drawn family is
        a target.
    seed : int
        Draws the target families, then the kept responses; the same seed gives the same
        targets at every budget and mode, and at one budget the same responses in both
        modes.
    targets : sequence of str, optional
        The target models, instead of drawing families.

    Returns
    -------
    masked : DataFrame
        The references' rows unchanged, then the targets' kept rows, with the input's
        columns; a target cell's ``reference_score`` (when the column exists) is NaN, as a
        new model has no full-task score.
    targets : ndarray of str
        The target models, sorted.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    if mode not in NEW_MODEL_MODES:
        raise ValueError(f"mode must be one of {', '.join(NEW_MODEL_MODES)}, got {mode!r}")
    rng = np.random.default_rng(seed)
    families = (
        records["family"] if "family" in records.columns else records["model"].map(default_family)
    )
    if targets is None:
        chosen = choose_target_families(families.to_numpy(), target_share, rng)
        targets = records.loc[families.isin(chosen).to_numpy(), "model"].unique()
    targets = np.sort(np.asarray(targets, dtype=str))
    unknown = np.setdiff1d(targets, records["model"].unique())
    if len(unknown):
        raise ValueError(f"unknown target model(s) {', '.join(map(repr, unknown[:5]))}")
    is_target = records["model"].isin(targets).to_numpy()
    if families[~is_target].nunique() < 2:
        raise ValueError("the new-model protocol needs references from at least two families")
    thinned = subsample_cells(
        records[is_target], budget, rho=0.0, random_state=int(rng.integers(2**31))
    )
    thinned = thinned[list(records.columns)]
    if "reference_score" in thinned.columns:
        thinned["reference_score"] = np.nan
    if mode == "responses-only" and "score" in thinned.columns:
        thinned["score"] = np.nan
    masked = pd.concat([records[~is_target], thinned], ignore_index=True)
    return masked, targets


def mask_targets(records: pd.DataFrame, targets, budget: int, *, seed: int = 0) -> pd.DataFrame:
    """Targets judged honestly: each keeps ``budget`` responses per task, judged against
    the cell's full data.

    What the Predictions page and ``predict --targets --budget`` run: a target cell keeps
    ``budget`` of its responses (drawn per model independently, seeded; the rest is hidden
    from every method), and its ``reference_score`` becomes the mean of all its scored
    responses (the input's ``reference_score`` where it gives one), so a prediction is
    never judged against data it used. A target cell with at most ``budget`` responses
    hides nothing, so unless the input gives its ``reference_score`` it gets no
    reference (NaN): nothing there is held out to judge.
    Every other cell keeps its rows, and its ``reference_score`` is its reference as
    before (the input's, else its sample score, :func:`pkps_core.records.cell_table`).

    Parameters
    ----------
    records : DataFrame
        Canonical records.
    targets : sequence of str
        Models of ``records``.
    budget : int
        Responses kept per target cell (at least 1).
    seed : int, default=0
        Draws the kept responses.

    Returns
    -------
    DataFrame
        The non-targets' rows, then the targets' kept rows, with a ``reference_score``
        column.

    Raises
    ------
    RecordsError
        ``budget`` below 1, or a target not in ``records``.
    """
    if int(budget) < 1:
        raise RecordsError(f"the budget must be at least 1 response per task, got {budget}")
    frame = validate_records(records)
    targets = sorted(set(map(str, targets)))
    unknown = sorted(set(targets) - set(frame["model"]))
    if unknown:
        raise RecordsError(
            f"unknown target model(s) {', '.join(map(repr, unknown[:5]))}; targets must be "
            "model ids present in the input"
        )
    is_target = frame["model"].isin(targets).to_numpy()
    if "score" in frame.columns:
        keys = pd.MultiIndex.from_frame(frame[["model", "task"]])
        full = full_scores(frame).reindex(keys).to_numpy(dtype=float)
    else:
        full = np.full(len(frame), np.nan)
    given = "reference_score" in frame.columns
    frame["reference_given"] = (
        frame["reference_score"].notna().to_numpy() if given else np.zeros(len(frame), bool)
    )
    # the others' references as they were: the input's where it has the column
    frame["reference_score"] = np.where(
        is_target | (not given), full, frame["reference_score"] if given else np.nan
    )
    thinned = subsample_cells(frame[is_target], int(budget), rho=0.0, random_state=int(seed))
    size = frame[is_target].groupby(["model", "task"]).size()
    hid_nothing = size.reindex(pd.MultiIndex.from_frame(thinned[["model", "task"]])) <= budget
    # a truth made of the very responses the prediction saw judges nothing; a given
    # reference_score is independent of them and stays
    own_truth = ~thinned["reference_given"].to_numpy(dtype=bool)
    thinned.loc[hid_nothing.to_numpy() & own_truth, "reference_score"] = np.nan
    thinned = thinned.drop(columns="reference_given")
    frame = frame.drop(columns="reference_given")
    return pd.concat([frame[~is_target], thinned[list(frame.columns)]], ignore_index=True)


def split_models(
    full_scores: np.ndarray, split: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Source and target model indices for one of the second paper's splits.

    ``"interpolation"``: a random 75 % of models are sources, the other 25 % targets.
    ``"extrapolation"``: models ranked by full score; the lowest 50 % are sources and the
    highest 30 % targets (the middle 20 % are unused).
    """
    n = len(full_scores)
    if split == "interpolation":
        order = rng.permutation(n)
        n_sources = int(round(0.75 * n))
        return np.sort(order[:n_sources]), np.sort(order[n_sources:])
    if split == "extrapolation":
        order = np.argsort(full_scores, kind="stable")
        return np.sort(order[: n // 2]), np.sort(order[n - int(round(0.3 * n)) :])
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


# the budgets a protocol sweeps when none are given
DEFAULT_BUDGETS = {"new-model": (1, 2, 4, 8, 16), "query-efficiency": (1, 2, 4, 8)}
