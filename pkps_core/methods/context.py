"""What every prediction method reads: the context of one prediction run, and its results.

A :class:`PredictionContext` holds the validated records, the prepared arrays, the holdout
rule and the target models. Results that several methods share are kept in two explicit
caches: ``shared`` for what reads no reference (the fitted spaces, the item tables) and may
be reused by the fold contexts of a calibration run (:meth:`PredictionContext.fold`), and
``cache`` for what reads references and belongs to this context alone.

Information rule of every method: a cell (i, t) may use the model's own observed responses
and scores, and references (other models' full-task scores and item scores) only from the
models :func:`allowed_references` allows — not the model itself (``holdout="model"``) or
not its whole family (``holdout="family"``), and never a model marked as a target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pkps_core.space.knn import cell_matrix, choose_bandwidth, knn_grid_predictions
from pkps_core.space.out_of_sample import out_of_sample_fit
from pkps_core.space.prepare import PreparedCache

if TYPE_CHECKING:  # scikit-learn takes ~1 s to import: a placement fits no space
    from pkps_core.space import PerspectiveSpace

HOLDOUTS = ("model", "family")
NEIGHBOURS = ("embedding", "distances", "out-of-sample")


@dataclass
class MethodResult:
    """A method's predictions on the models × tasks grid, with per-cell notes."""

    prediction: np.ndarray
    notes: np.ndarray | None = None


def allowed_references(
    families: np.ndarray,
    holdout: str,
    targets: np.ndarray | None = None,
    hidden: np.ndarray | None = None,
    origin: np.ndarray | None = None,
) -> np.ndarray:
    """``allowed[i, j]``: model j's references and item scores may inform model i's cells.

    Parameters
    ----------
    families : ndarray of str (n_models,)
    holdout : {"model", "family"}
        Exclude the model itself, or every model of its family.
    targets, hidden : ndarray of bool (n_models,), optional
        Models that never inform anyone (targets; a calibration fold's hidden models).
    origin : ndarray of int (n_models,), optional
        For a shadow (:mod:`pkps_core.methods.shadows`) the index of its original, which
        never informs it (it shares the family too); -1 for every other model.
    """
    if holdout not in HOLDOUTS:
        raise ValueError(f"holdout must be 'model' or 'family', got {holdout!r}")
    if holdout == "family":
        allowed = families[:, None] != families[None, :]
    else:
        allowed = ~np.eye(len(families), dtype=bool)
    for excluded in (targets, hidden):
        if excluded is not None:
            allowed &= ~np.asarray(excluded, dtype=bool)[None, :]
    if origin is not None:
        shadows = np.flatnonzero(np.asarray(origin) >= 0)
        allowed[shadows, np.asarray(origin)[shadows]] = False
    return allowed


@dataclass
class PredictionContext:
    """Everything a prediction method may use, computed once and shared.

    Attributes
    ----------
    records : DataFrame
        The validated canonical records.
    prepared : PreparedCache
    holdout : {"model", "family"}
    targets : ndarray of bool (n_models,) or None
        Models treated as new: their cells never serve as references.
    space_params : dict
        Parameters of the PKPS estimator (DKPS uses the same with the delta kernel).
    n_neighbors : int
        K of the per-task KNN regression.
    shared : dict
        Results that read no reference, keyed by name; shared with :meth:`fold` contexts.
    cache : dict
        Results that read references, keyed by name; this context's alone.
    origin : ndarray of int (n_models,) or None
        Shadows (:mod:`pkps_core.methods.shadows`): the index of each shadow's original
        model, -1 for the real models; None when the run has no shadows. Shadows are
        targets; every calibration reads their cells (:attr:`calibration_truth`).
    rows : ndarray of bool (n_models,) or None
        The models whose cells the run needs predicted (None: every model). The fitted
        reference predictor (:mod:`pkps_core.predictor`) sets it to the shadows while it
        calibrates and to the new models while it places them, so the methods that fit
        one model at a time (RS-Learn, AIPW, the length line) skip the rest; their cells
        stay NaN.
    neighbours : {"embedding", "distances", "out-of-sample"}
        Whether the KNN of the space methods measures distance in the MDS coordinates
        (Eq. 2, the papers), by D itself (no embedding error; new models placed by their
        distance rows alone), or in the MDS of the references with the targets (shadows
        included) placed out of sample, each by the references it may be informed by
        (:mod:`pkps_core.space.out_of_sample`; the same as "embedding" without targets).
    """

    records: pd.DataFrame
    prepared: PreparedCache
    holdout: str = "model"
    targets: np.ndarray | None = None
    space_params: dict = field(default_factory=dict)
    n_neighbors: int = 5
    shared: dict = field(default_factory=dict, repr=False)
    cache: dict = field(default_factory=dict, repr=False)
    origin: np.ndarray | None = None
    neighbours: str = "embedding"
    rows: np.ndarray | None = None

    # ------------------------------------------------------------------ caches

    def cached(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per context (for results that read references)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def cached_shared(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once for this context and its folds (results that read no
        reference, so they are the same under any holdout and any targets)."""
        if key not in self.shared:
            self.shared[key] = compute()
        return self.shared[key]

    def fold(self, hidden: np.ndarray) -> PredictionContext:
        """A family-holdout copy in which the ``hidden`` models are targets too.

        The copy shares :attr:`shared` (spaces, item tables) and starts an empty
        :attr:`cache`, so nothing computed from the hidden models' references leaks in.
        """
        targets = np.asarray(hidden, dtype=bool).copy()
        if self.targets is not None:
            targets |= np.asarray(self.targets, dtype=bool)
        return dataclasses.replace(
            self, holdout="family", targets=targets, shared=self.shared, cache={}
        )

    def prediction_rows(self) -> np.ndarray:
        """Indices of the models whose cells the run predicts (:attr:`rows`)."""
        if self.rows is None:
            return np.arange(len(self.models))
        return np.flatnonzero(np.asarray(self.rows, dtype=bool))

    # ------------------------------------------------------------------ the grid

    @property
    def models(self) -> np.ndarray:
        return self.prepared.models

    @property
    def families(self) -> np.ndarray:
        return self.prepared.families

    @property
    def tasks(self) -> np.ndarray:
        return self.prepared.tasks

    @property
    def shadows(self) -> np.ndarray:
        """Mask of the shadow models (all False without shadows)."""
        if self.origin is None:
            return np.zeros(len(self.models), dtype=bool)
        return np.asarray(self.origin) >= 0

    @property
    def has_shadows(self) -> bool:
        return bool(self.shadows.any())

    @cached_property
    def calibration_truth(self) -> np.ndarray:
        """Per cell, the truth a shadow is judged against (its original's training
        reference); NaN on every other cell."""
        truth = np.full((len(self.models), len(self.tasks)), np.nan)
        shadows = np.flatnonzero(self.shadows)
        if len(shadows):  # an original is a reference, never a target
            truth[shadows] = self.training_references[np.asarray(self.origin)[shadows]]
        return truth

    @property
    def seed(self) -> int:
        """The run's seed (``space_params["random_state"]``, 0 when unset)."""
        seed = self.space_params.get("random_state", 0)
        return 0 if seed is None else int(seed)

    def empty_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """A models × tasks grid of NaN predictions and empty notes."""
        shape = (len(self.models), len(self.tasks))
        return np.full(shape, np.nan), np.full(shape, "", dtype=object)

    @cached_property
    def sample(self) -> np.ndarray:
        """Sample score per cell (NaN: no scored response)."""
        return cell_matrix(self.prepared.cells, self.models, self.tasks, "sample_score")

    @cached_property
    def n_responses(self) -> np.ndarray:
        counts = cell_matrix(self.prepared.cells, self.models, self.tasks, "n_responses")
        return np.nan_to_num(counts).astype(int)

    @cached_property
    def reference_score(self) -> np.ndarray:
        return cell_matrix(self.prepared.cells, self.models, self.tasks, "reference_score")

    @cached_property
    def training_references(self) -> np.ndarray:
        """References usable for training: target models' cells removed."""
        references = cell_matrix(self.prepared.cells, self.models, self.tasks, "reference")
        if self.targets is not None:
            references[self.targets] = np.nan
        return references

    def item_sd(self) -> np.ndarray:
        """Per task, the pooled within-cell standard deviation of the item scores."""

        def compute() -> np.ndarray:
            frame = self.records
            sd = np.full(len(self.tasks), np.nan)
            if "score" not in frame.columns:
                return sd
            scored = frame.dropna(subset=["score"])
            cell_mean = scored.groupby(["model", "task"])["score"].transform("mean")
            by_task = ((scored["score"] - cell_mean) ** 2).groupby(scored["task"]).mean() ** 0.5
            return by_task.reindex(self.tasks).to_numpy(dtype=float)

        return self.cached_shared("item_sd", compute)

    def sampling_error(self) -> np.ndarray:
        """Per cell, the standard error of its sample score, ``s_t / sqrt(n)`` (NaN where
        the cell has no responses or the task no item SD)."""
        n = self.n_responses.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, self.item_sd()[None, :] / np.sqrt(n), np.nan)

    # ------------------------------------------------------------------ who informs whom

    @property
    def groups(self) -> np.ndarray:
        """Holdout unit per model: its family (holdout="family") or itself."""
        if self.holdout == "family":
            return np.unique(self.families, return_inverse=True)[1]
        return np.arange(len(self.models))

    def allowed(self, holdout: str | None = None) -> np.ndarray:
        """:func:`allowed_references` under ``holdout`` (default: the context's); a copy of
        the one computed per holdout (the trust checks ask once per flagged model)."""
        holdout = holdout or self.holdout
        return self.cached(
            ("allowed", holdout),
            lambda: allowed_references(self.families, holdout, self.targets, origin=self.origin),
        ).copy()

    def training_matrix(self, i: int, allowed: np.ndarray) -> np.ndarray:
        """The matrix model i's completion may see: allowed models' references, its own
        sample scores."""
        matrix = np.where(allowed[i][:, None], self.training_references, np.nan)
        matrix[i] = self.sample[i]
        return matrix

    # ------------------------------------------------------------------ reference-free results

    def space(self, name: str) -> PerspectiveSpace:
        """The fitted ``"pkps"`` (RBF query kernel) or ``"dkps"`` (delta) space."""
        kernel = {"pkps": "rbf", "dkps": "delta"}[name]
        params = {**self.space_params, "query_kernel": kernel}

        def fit() -> PerspectiveSpace:
            from pkps_core.space import PerspectiveSpace

            excluded = self.models[self.targets] if self.targets is not None else None
            space = PerspectiveSpace(**params).fit(self.prepared, cv_exclude=excluded)
            if self.has_shadows and kernel == "rbf" and params.get("query_bandwidth", "cv") == "cv":
                space = self._bandwidth_at_target_budget(space)
            return space

        return self.cached_shared(("space", name), fit)

    def _bandwidth_at_target_budget(self, space: PerspectiveSpace) -> PerspectiveSpace:
        """The grid bandwidth whose KNN predicts the shadows best (MAE against their
        originals' references), instead of the fit's own cross-validation on every
        model's observed scores: the shadows are observed like the targets, so this is
        the choice for the targets' budget. The errors
        are kept in ``target_cv_errors_`` (NaN where no shadow cell could be judged)."""
        truth = self.calibration_truth
        observed = (self.n_responses > 0) & np.isfinite(truth)
        if not observed.any() or len(space.bandwidth_grid_) < 2:
            return space
        candidates = [space.select_bandwidth(bandwidth) for bandwidth in space.bandwidth_grid_]
        errors = []
        for candidate in candidates:
            knn = self.knn(candidate)
            usable = observed & np.isfinite(knn)
            errors.append(np.abs(knn - truth)[usable].mean() if usable.any() else np.nan)
        errors = np.asarray(errors)
        if not np.isfinite(errors).any():
            return space
        chosen = candidates[choose_bandwidth(errors, space.undefined_pairs_grid_)]
        chosen.target_cv_errors_ = errors
        return chosen

    def space_unavailable(self, name: str) -> str | None:
        """Why the ``name`` space cannot be fitted on this cache (None: it can): PKPS's
        RBF query kernel needs query text or query embeddings, which a score-only cache
        lacks. A cache with text for only some queries is not excused: fitting names the
        rows to fill."""
        prepared = self.prepared
        if name == "pkps" and prepared.query_vectors is None and not prepared.query_gap:
            return (
                "PKPS needs query text or query embeddings; this cache has neither "
                "(add a 'query' column, or use dkps)"
            )
        return None

    @property
    def pkps(self) -> PerspectiveSpace:
        return self.space("pkps")

    @property
    def dkps(self) -> PerspectiveSpace:
        return self.space("dkps")

    def item_tables(self) -> list[np.ndarray]:
        """Per task (in :attr:`tasks` order) the models × items matrix of scores (NaN = none)."""
        return self.cached_shared("item_tables", self._build_item_tables)

    def _build_item_tables(self) -> list[np.ndarray]:
        frame = self.records
        scores = (
            frame["score"].to_numpy(dtype=float)
            if "score" in frame.columns
            else np.full(len(frame), np.nan)
        )
        model_pos = np.searchsorted(self.models, frame["model"].to_numpy(dtype=str))
        task_pos = np.searchsorted(self.tasks, frame["task"].to_numpy(dtype=str))
        query_ids = frame["query_id"].to_numpy(dtype=str)
        tables = []
        for t in range(len(self.tasks)):
            rows = np.flatnonzero(task_pos == t)
            items, item_pos = np.unique(query_ids[rows], return_inverse=True)
            table = np.full((len(self.models), len(items)), np.nan)
            table[model_pos[rows], item_pos] = scores[rows]
            tables.append(table)
        return tables

    def coordinates(self, space: PerspectiveSpace) -> np.ndarray:
        """The models' coordinates in ``space`` the KNN reads: the joint MDS, or (with
        ``neighbours="out-of-sample"`` and targets) the references' MDS with every target
        placed out of sample."""
        if self.mds_inside() is None:
            return space.embedding_
        return self.out_of_sample_fit(space)[0]

    def mds_inside(self) -> np.ndarray | None:
        """The models inside the MDS the KNN reads, the others placed out of sample into
        it: the non-targets with ``neighbours="out-of-sample"`` (at least two), else None
        (every model: the joint MDS)."""
        targets = self.targets
        if self.neighbours != "out-of-sample" or targets is None or not targets.any():
            return None
        inside = ~np.asarray(targets, dtype=bool)
        return inside if inside.sum() >= 2 else None

    def out_of_sample_fit(self, space: PerspectiveSpace) -> tuple[np.ndarray, np.ndarray]:
        """The references' MDS in ``space`` with every target placed out of sample by the
        references it may be informed by (:meth:`allowed`: not a shadow's own original and
        family, which hold its very responses), and the MDS's eigenvalues
        (:func:`~pkps_core.space.out_of_sample.out_of_sample_fit`); made once per space
        object (the members and the intervals read the same space many times)."""
        key = ("out-of-sample fit", id(space))
        kept = self.cache.get(key)
        if kept is None or kept[0] is not space:
            fit = out_of_sample_fit(
                space.distance_matrix_, self.mds_inside(), space.embedding_.shape[1], self.allowed()
            )
            kept = self.cache[key] = (space, fit)
        return kept[1]

    def knn(self, space: PerspectiveSpace) -> np.ndarray:
        """Per-task KNN of every cell from the allowed references in ``space`` (by
        :attr:`neighbours`)."""
        return knn_grid_predictions(
            self.coordinates(space),
            self.training_references,
            self.allowed(),
            self.n_neighbors,
            distances=space.distance_matrix_ if self.neighbours == "distances" else None,
        )
