"""The fitted reference predictor: fit once on the references, place every new model fast.

The new-model prediction (:func:`pkps_core.predict.build_context` with targets) calibrates
everything on the references' *shadows* — copies observed like the targets
(:mod:`pkps_core.methods.shadows`) — and none of that depends on the target: targets never
inform anyone. :class:`ReferencePredictor` therefore does that work once per *profile*
(a per-task budget m on the grid :data:`PROFILE_BUDGETS`, scored or responses-only) and
keeps, per profile, the calibration run: the shadows, the PKPS and DKPS spaces of the
references with their shadows (kernel sums, distances, MDS at the bandwidth chosen for
that budget), every ensemble member's predictions of the shadows, the stacked ensemble's,
the region check's thresholds and the item SDs.

A new model is then *placed*: its texts are embedded with the references' embedder, its
kernel sums against the references and shadows are computed (only the pairs that involve
its responses, :func:`~pkps_core.space.increments.increment_sums`), its distances follow
from Eq. (1) with the stored sums, and it is put into the stored MDS out of sample
(Gower 1968; Trosset and Priebe 2008; the PKPS paper's ref. [45]) without moving anyone.
Each member predicts its cells only, the stacking weights for its pattern of members are
fitted on the stored shadow predictions, and its intervals come from the stored
calibration. A batch of new models is placed in one pass (they never inform each other).

The calibration profile of a new model is the grid budget at or below the median number
of responses of its answered tasks, with its kind (scored if any response has a score);
the output's ``note`` says which. A model that answered only some tasks gets a profile of
its own (its tasks), fitted on first use and kept.

The module is over 500 lines because fitting a profile and placing into it are one
concept read together: the placement replays the calibration run's steps on the same
context, and splitting them would put each step's two halves in two files.

The state is arrays and a few numbers (:mod:`pkps_core.predictor.state`), kept in the
store (:mod:`pkps_core.store.fits`) without pickle.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pkps_core.methods import METHODS, PredictionContext
from pkps_core.methods.shadows import shadow_records, with_shadows_added
from pkps_core.methods.stacking import STACK_MEMBERS, member_predictions
from pkps_core.predict import OUTPUT_COLUMNS, TARGET_BANDWIDTH_GRID
from pkps_core.predictor.grid import MODES, PROFILE_BUDGETS
from pkps_core.predictor.placement import (
    PlacedSpace,
    nearest_allowed,
    new_model_pairs,
    place,
    placed_coordinates,
    placement_features,
)
from pkps_core.predictor.profiles import drawn_levels, first_shadows, without_shadow_scores
from pkps_core.predictor.shadow_sums import (
    budget_levels,
    nested_shadow_pair_sums,
    shadow_pair_sums,
)
from pkps_core.records import RecordsError, validate_records
from pkps_core.space import kernels
from pkps_core.space.increments import increment_sums
from pkps_core.space.knn import cell_matrix
from pkps_core.space.prepare import append_models, prepare_cache
from pkps_core.space.runtime import WorkerPool, single_threaded_blas
from pkps_core.trust import trust_columns
from pkps_core.trust.cells import task_query_counts
from pkps_core.trust.extrapolation import region_distances_among
from pkps_core.trust.responses import length_features, mean_log_lengths

if TYPE_CHECKING:  # scikit-learn takes ~1 s to import: a placement does not need it
    from pkps_core.space import PerspectiveSpace

__all__ = ["MODES", "PROFILE_BUDGETS", "PlacedSpace", "Profile", "ReferencePredictor", "profile_of"]

# shadows per reference and profile: twice the refit path's where every reference answered
# every task; the refit path's two where cells are missing (the completion member then runs
# on every shadow and its cost grows with their square: the demo store's fit, 16 s -> 48 s)
PREDICTOR_SHADOW_REPEATS = {"complete": 4, "missing cells": 2}
METHOD = "ensemble"
SPACES = ("pkps", "dkps")
PHANTOM = "\x00phantom target"
NEW_TAG = " [new]"
STATE_VERSION = 2  # 2: the KNN's coordinates by `neighbours` (out of sample by default)
NEIGHBOURS = ("out-of-sample", "embedding", "distances")
# the query kernels every profile's shadow sums read are kept through a fit or a calibrate()
# call while they take at most this
QUERY_KERNELS_KEPT_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Profile:
    """Who a calibration run rehearses: ``budget`` responses per task (at most the task's
    queries), scored or not, on ``tasks`` (None: every task)."""

    budget: int
    scored: bool
    tasks: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        kind = "scored" if self.scored else "responses-only"
        where = "all" if self.tasks is None else json.dumps(list(self.tasks))
        return f"m={self.budget}|{kind}|{where}"

    def label(self) -> str:
        kind = "scored" if self.scored else "responses only"
        return f"m = {self.budget} per task, {kind}"

    def describe(self) -> str:
        return f"calibrated at {self.label()}"


def profile_of(
    n_responses: np.ndarray, scored: bool, tasks: np.ndarray, budgets: Sequence[int]
) -> Profile:
    """The profile of a new model with ``n_responses`` per task (0: unanswered): the grid
    budget at or below its median over answered tasks, on its answered tasks."""
    answered = n_responses > 0
    median = float(np.median(n_responses[answered])) if answered.any() else 1.0
    grid = np.asarray(sorted(budgets))
    below = grid[grid <= median]
    budget = int(below.max() if len(below) else grid.min())
    subset = None if answered.all() else tuple(str(t) for t in tasks[answered])
    return Profile(budget, bool(scored), subset)


@dataclass
class _Calibration:
    """One profile's calibration run: the context of references and shadows, and what the
    placement of new models reads from it."""

    profile: Profile
    context: PredictionContext
    spaces: dict  # space name -> PlacedSpace of the context's models
    sums: dict  # space name -> KernelSums of the context's models
    grids: dict  # method name -> (n_models, n_tasks) predictions of the shadows
    region_threshold: np.ndarray
    fit_seconds: float = 0.0


class ReferencePredictor:
    """Fit once on reference models; predict new models from a few responses each.

    Parameters
    ----------
    budgets : sequence of int, default=(1, 2, 4, 8, 16, 32)
        Per-task budgets of the calibration profiles.
    modes : sequence of {"scored", "responses-only"}, default both
    holdout : {"family", "model"}, default="family"
        Which references may not inform a new model (its family: the new-model protocol).
    n_neighbors : int, default=5
    shadow_repeats : int or "auto", default="auto"
        Shadows per reference and profile (:mod:`pkps_core.methods.shadows`). "auto": four
        where every reference answered every task, twice the refit path's
        (:data:`~pkps_core.methods.shadows.SHADOW_REPEATS`) — the fit is made once, and
        with two the calibration's draw moved the placed ensemble's cell MAE by up to
        11 % from the refit path's at some budgets (docs/results/predictor-quality.md);
        placement costs follow the shadows' responses, not their number
        (``shadow_sums``). Two where
        cells are missing: the completion member runs on every shadow there, at a cost
        that grows with their square. The number used is :attr:`shadow_repeats_`.
    space_params : dict, optional
        :class:`~pkps_core.space.PerspectiveSpace` parameters; defaults as in a run with
        targets (U-statistic, the wider bandwidth grid).
    random_state : int, default=0
    neighbours : {"out-of-sample", "embedding", "distances"}, default="out-of-sample"
        Where the KNN of the space members measures distance
        (:class:`~pkps_core.methods.PredictionContext`). "out-of-sample": in the MDS of the
        references alone, every shadow placed out of sample by its distances to the
        references its holdout allows (not its own original and family, which hold its
        very responses), as every new model is placed
        (:func:`~pkps_core.space.out_of_sample.place_by_allowed`) — the calibration
        rehearses the new models' own situation,
        and the references' map does not depend on the shadows (their number, their
        budget). "embedding": the MDS of the references with the shadows (Eq. 2), new
        models placed into it. "distances": by D itself.

    Attributes
    ----------
    references_ : ndarray of str
        The reference models.
    tasks_ : ndarray of str
    profiles_ : dict
        Profile key -> fitted calibration.
    fit_seconds_ : float
    """

    def __init__(
        self,
        *,
        budgets: Sequence[int] = PROFILE_BUDGETS,
        modes: Sequence[str] = MODES,
        holdout: str = "family",
        n_neighbors: int = 5,
        shadow_repeats: int | str = "auto",
        space_params: dict | None = None,
        random_state: int = 0,
        neighbours: str = "out-of-sample",
    ):
        self.budgets = budgets
        self.modes = modes
        self.holdout = holdout
        self.n_neighbors = n_neighbors
        self.shadow_repeats = shadow_repeats
        self.space_params = space_params
        self.random_state = random_state
        self.neighbours = neighbours

    # ------------------------------------------------------------------ settings

    def _check_params(self) -> None:
        budgets = list(self.budgets)
        if not budgets or any(int(b) != b or b < 1 for b in budgets):
            raise ValueError(f"budgets must be integers ≥ 1, got {budgets}")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not len(self.modes):
            raise ValueError(f"modes must be among {', '.join(MODES)}, got {list(self.modes)}")
        if self.holdout not in ("family", "model"):
            raise ValueError(f"holdout must be 'family' or 'model', got {self.holdout!r}")
        if self.shadow_repeats != "auto" and int(self.shadow_repeats) < 1:
            raise ValueError("shadow_repeats must be 'auto' or at least 1")
        if int(self.n_neighbors) < 1:
            raise ValueError("n_neighbors must be at least 1")
        if self.neighbours not in NEIGHBOURS:
            raise ValueError(
                f"neighbours must be one of {', '.join(NEIGHBOURS)}, got {self.neighbours!r}"
            )

    def _space_params(self) -> dict:
        params = dict(self.space_params or {})
        params.setdefault("self_pairs", "exclude")
        params.setdefault("bandwidth_grid", TARGET_BANDWIDTH_GRID)
        params.setdefault("random_state", self.random_state)
        return params

    def settings(self) -> dict:
        """The parameters as JSON-able values (the store keys a fit by them)."""
        return {
            "budgets": [int(b) for b in self.budgets],
            "modes": list(self.modes),
            "holdout": self.holdout,
            "n_neighbors": int(self.n_neighbors),
            "shadow_repeats": (
                "auto" if self.shadow_repeats == "auto" else int(self.shadow_repeats)
            ),
            "space_params": {k: _jsonable(v) for k, v in self._space_params().items()},
            "random_state": int(self.random_state),
            "neighbours": self.neighbours,
            "state_version": STATE_VERSION,
        }

    # ------------------------------------------------------------------ fit

    def fit(
        self,
        records: pd.DataFrame,
        *,
        progress: Callable[[float, str], None] | None = None,
        validated: bool = False,
        lazy: bool = False,
    ) -> ReferencePredictor:
        """Calibrate every profile on ``records`` (the references, with embeddings or
        texts; texts are embedded once with the offline embedder).

        ``progress(fraction, message)`` is called before each profile; ``validated``
        skips the validation of records that already passed it (a store's); ``lazy``
        calibrates each profile on its first use instead (a protocol run that needs one).
        """
        self._check_params()
        started = time.perf_counter()
        frame = records if validated else validate_records(records)
        self._set_references(frame)
        profiles = [
            Profile(int(b), mode == "scored") for mode in self.modes for b in sorted(self.budgets)
        ]
        if lazy:
            profiles = []
        self.profiles_ = {}
        # BLAS on one thread throughout (a multi-threaded BLAS spinning on the many small
        # products took twice as long on a loaded 2-core machine); the shadows' kernel
        # sums spread their bandwidths over the fit's own threads instead
        self._pool = WorkerPool()
        self._base_lock = threading.Lock()
        self._query_kernels_kept = {}
        try:
            with single_threaded_blas():
                self._contexts = self._nested_shadow_sums(profiles, progress)
                self._calibrate_all(profiles, progress, self._pool.threads)
        finally:
            self.__dict__.pop("_pool").close()
            self.__dict__.pop("_base_lock")
            self.__dict__.pop("_contexts", None)
            self.__dict__.pop("_query_kernels_kept", None)
        if progress is not None:
            progress(1.0, "done")
        self.__dict__.pop("_bases", None)  # what every profile shared; not state
        self.__dict__.pop("_by_budget", None)
        self.fit_seconds_ = time.perf_counter() - started
        return self

    def _nested_shadow_sums(self, profiles: list[Profile], progress) -> dict:
        """The PKPS shadow sums of every budget in one pass, where the budgets' shadows are
        nested (they are: one shuffle per repeat, cut at the budget), handed to each
        budget's first profile as its context (profile key -> context). A budget's kernel
        rows and response products are then computed once for all budgets, not once per
        budget (:func:`~pkps_core.predictor.shadow_sums.nested_shadow_pair_sums`); the
        sums are the same. The references' own spaces are fitted and the pass runs on side
        threads while the smaller budgets' contexts are prepared (pandas work, mostly
        under the GIL); the pass's levels come from the drawn shadows' keys and are
        checked against the prepared contexts before any sum is used. Empty where there
        is one budget; no sums where PKPS cannot be fitted or the response kernel does
        not factor through the queries."""
        firsts: dict[int, Profile] = {}
        for profile in profiles:
            if profile.tasks is None:
                firsts.setdefault(profile.budget, profile)
        if len(firsts) < 2:
            return {}
        if progress is not None:
            progress(0.0, f"drawing the shadows of {len(firsts)} budgets")
        budgets = sorted(firsts)
        drawn = [self._profile_shadows(firsts[budget]) for budget in budgets]
        largest = self._profile_context(firsts[budgets[-1]], drawn[-1])
        contexts = {budgets[-1]: largest}
        by_level = None
        with ThreadPoolExecutor(len(SPACES) + 1, thread_name_prefix="pkps-base") as side:
            bases = {
                name: side.submit(self._base_space, name, largest)
                for name in SPACES
                if largest.space_unavailable(name) is None
            }
            level = drawn_levels(largest, [rows for rows, _ in drawn[:-1]])
            planner = _unfitted_space("pkps", largest)  # what the base fit will try
            summed = None
            if (
                "pkps" in bases
                and level is not None
                and planner.response_kernel in ("linear", "cosine")
            ):
                if progress is not None:
                    progress(
                        0.0, f"summing the shadows' kernels ({len(budgets)} budgets, one pass)"
                    )
                summed = side.submit(self._sum_levels, planner, largest, level, len(budgets))
            for budget, shadows in zip(budgets[:-1], drawn[:-1], strict=True):
                contexts[budget] = self._profile_context(firsts[budget], shadows)
            if summed is not None:
                by_level = summed.result()
            for future in bases.values():
                future.result()
        ordered = [contexts[budget] for budget in budgets]
        if by_level is not None:
            grid, by_level = by_level
            prepared = [context.prepared for context in ordered]
            found = budget_levels(prepared, largest.shadows)
            if found is not None and np.array_equal(found, level):
                for context, pairs in zip(ordered, by_level, strict=True):
                    context.shared[("shadow pair sums", "pkps")] = (grid, pairs)
        return {firsts[budget].key: contexts[budget] for budget in budgets}

    def _sum_levels(self, planner, largest: PredictionContext, level: np.ndarray, n_levels: int):
        """The one pass over ``largest``'s shadows in ``n_levels`` levels, at the grid the
        references' PKPS fit (``planner``, unfitted) tries, without waiting for that fit:
        ``(grid, sums per level)``."""
        features, grid = planner.planned_grid(largest.prepared)
        features = _context_features(planner, largest, features)  # its profile reads them
        sums = nested_shadow_pair_sums(
            largest.prepared.layout,
            features,
            largest.prepared.query_vectors,
            grid,
            largest.shadows,
            level=level,
            pool=self._pool,
            n_levels=n_levels,
        )
        return grid, sums

    def _calibrate_all(self, profiles: list[Profile], progress, threads: int) -> None:
        """Every profile on the fit's threads. A budget's first profile computes the
        spaces its other modes reuse, so those wait for it; the first profiles start
        largest budget first and the others (a fraction of the time: they reuse the spaces)
        queue behind them, so the threads finish together. A profile's calibration does
        not depend on the order, so the threads change only the time; ``progress`` is
        called from the calling thread (an app session's)."""
        by_budget: dict[tuple, list[Profile]] = {}
        for profile in profiles:
            by_budget.setdefault((profile.budget, profile.tasks), []).append(profile)
        groups = [by_budget[key] for key in sorted(by_budget, key=lambda k: -k[0])]
        threads = min(threads, len(groups))
        if threads <= 1:
            for k, profile in enumerate(profiles):
                if progress is not None:
                    progress(k / len(profiles), f"calibrating {profile.label()}")
                self._calibrate(profile)
            return

        def calibrate(profile: Profile) -> Profile:
            self._calibrate(profile)
            return profile

        if progress is not None:
            progress(0.0, f"calibrating {len(profiles)} profiles on {threads} threads")
        done = 0
        with ThreadPoolExecutor(threads, thread_name_prefix="pkps-fit") as executor:
            waiting = {executor.submit(calibrate, group[0]): group[1:] for group in groups}
            while waiting:
                finished, _ = wait(waiting, return_when=FIRST_COMPLETED)
                for future in finished:
                    profile = future.result()
                    for follower in waiting.pop(future):  # the same budget's other modes
                        waiting[executor.submit(calibrate, follower)] = []
                    done += 1
                    if progress is not None:
                        progress(done / len(profiles), f"calibrated {profile.label()}")
        # the profiles in grid order, as a sequential fit keeps them
        order = [profile.key for profile in profiles]
        self.profiles_ = {
            **{key: self.profiles_[key] for key in order},
            **{k: v for k, v in self.profiles_.items() if k not in order},
        }

    def _set_references(self, frame: pd.DataFrame, embedders: dict | None = None) -> None:
        if frame["model"].nunique() < 2:
            raise RecordsError("a reference predictor needs at least two reference models")
        if embedders is None:
            self.embedders_ = {}
            frame = self._embed_references(frame)
        else:  # restored: the references' texts are embedded as they were at the fit
            self.embedders_ = embedders  # a mapping (state.RestoredEmbedders restores lazily)
            frame = validate_records(self.embed(frame)) if embedders else frame
        self.reference_frame_ = frame
        self.prepared_ = prepare_cache(frame, validated=True)
        self.references_ = self.prepared_.models
        self.tasks_ = self.prepared_.tasks
        self._reference_cells = cell_matrix(
            self.prepared_.cells, self.prepared_.models, self.prepared_.tasks, "reference"
        )
        self.task_queries_ = (
            self.prepared_.query_keys.iloc[:, 0].value_counts().reindex(self.tasks_).to_numpy()
        )
        complete = bool(np.isfinite(self._reference_cells).all()) and bool(
            (self.prepared_.cells["n_responses"] > 0).all()
            and len(self.prepared_.cells) == len(self.references_) * len(self.tasks_)
        )
        self.shadow_repeats_ = (
            PREDICTOR_SHADOW_REPEATS["complete" if complete else "missing cells"]
            if self.shadow_repeats == "auto"
            else int(self.shadow_repeats)
        )

    def _embed_references(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Texts without vectors embedded once with the offline embedder, fitted on the
        references' texts and kept (:attr:`embedders_`) for the new models' texts."""
        from sklearn.base import clone

        from pkps_core.embed import default_embedder, fit_transform_texts, vectors_of

        frame = frame.copy()
        for kind in ("query", "response"):
            column = f"{kind}_embedding"
            if column in frame.columns or kind not in frame.columns:
                continue
            if frame[kind].isna().any():
                continue
            texts = frame[kind].astype(str)
            if kind == "query":
                distinct = frame.drop_duplicates(["task", "query_id"])[kind].astype(str)
            else:
                distinct = texts
            corpus = list(np.unique(distinct.to_numpy(dtype=object)))
            fitted = clone(default_embedder(), safe=False)
            vectors = fit_transform_texts(fitted, corpus)
            self.embedders_[kind] = fitted
            frame[column] = list(vectors_of(fitted, texts.tolist(), (corpus, vectors)))
        return frame

    def embed(self, records: pd.DataFrame) -> pd.DataFrame:
        """New models' records with vectors from the references' embedders, where they
        have texts and no vectors (unchanged where the references came with vectors)."""
        frame = records.copy()
        for kind in self.embedders_:
            column = f"{kind}_embedding"
            if column in frame.columns and frame[column].notna().all():
                continue
            if kind not in frame.columns or frame[kind].isna().any():
                raise RecordsError(
                    f"the new model's records need {kind} text (or {column}) on every row: "
                    f"the references' {kind}s were embedded from their text"
                )
            from pkps_core.embed import transform_texts  # scikit-learn: only to embed texts

            fitted = self.embedders_[kind]
            frame[column] = list(transform_texts(fitted, frame[kind].astype(str).tolist()))
        return frame

    def _profile_context(self, profile: Profile, drawn: tuple | None = None) -> PredictionContext:
        """References and their shadows observed like a target of ``profile`` (``drawn``:
        its :meth:`_profile_shadows`, when they are drawn already)."""
        rows, origin_of = self._profile_shadows(profile) if drawn is None else drawn
        records, augmented, origin = with_shadows_added(
            self.reference_frame_, self.prepared_, rows, origin_of
        )
        shadows = origin >= 0
        return PredictionContext(
            records=records,
            prepared=augmented,
            holdout=self.holdout,
            targets=shadows,
            space_params=self._space_params(),
            n_neighbors=int(self.n_neighbors),
            origin=origin,
            rows=shadows,
            neighbours=self.neighbours,
        )

    def _profile_shadows(self, profile: Profile) -> tuple[pd.DataFrame, dict]:
        """The shadows' rows of ``profile`` and each shadow's original
        (:func:`~pkps_core.methods.shadows.shadow_records`)."""
        prepared = self.prepared_
        models, tasks = prepared.models, prepared.tasks
        n = np.nan_to_num(cell_matrix(prepared.cells, models, tasks, "n_responses")).astype(int)
        scored = np.isfinite(cell_matrix(prepared.cells, models, tasks, "sample_score"))
        references = cell_matrix(prepared.cells, models, tasks, "reference")
        budget = np.minimum(profile.budget, self.task_queries_)
        if profile.tasks is not None:
            budget = np.where(np.isin(tasks, profile.tasks), budget, 0)
        phantom_models = np.append(models, PHANTOM)
        n_all = np.vstack([n, budget[None, :]])
        scored_all = np.vstack([scored, np.full((1, len(tasks)), profile.scored)])
        targets = np.append(np.zeros(len(models), dtype=bool), True)
        references_all = np.vstack([references, np.full((1, len(tasks)), np.nan)])
        rows, origin_of = shadow_records(
            prepared.frame,
            phantom_models,
            tasks,
            n_all,
            scored_all,
            targets,
            references_all,
            repeats=int(self.shadow_repeats_),
            seed=int(self.random_state),
        )
        if rows is None:
            raise RecordsError("no reference model has a reference score to calibrate on")
        return rows, origin_of

    def _base_space(self, name: str, context: PredictionContext):
        """The references' own fit of space ``name`` at every grid bandwidth (kept for the
        fit's duration): every profile adds its shadows' sums to it."""
        cache = self.__dict__.setdefault("_bases", {})
        lock = self.__dict__.get("_base_lock") or contextlib.nullcontext()
        with lock:  # the fit's threads share one base fit per space
            if name not in cache:
                cache[name] = _unfitted_space(name, context).fit(self.prepared_)
            return cache[name]

    def _query_kernels(self, name: str, queries: np.ndarray | None, grid: np.ndarray):
        """Space ``name``'s query kernel at every grid bandwidth
        (:func:`~pkps_core.space.kernels.query_kernel_matrices`), made once for
        every profile: a profile's shadows answer the references' queries, so its query
        vectors are the references' (checked; made afresh where they are not). Kept while
        a fit or a :meth:`calibrate` call runs, when they take at most
        :data:`QUERY_KERNELS_KEPT_BYTES`; None (the sums make their own) otherwise."""
        cache = self.__dict__.get("_query_kernels_kept")
        if queries is None or cache is None:
            return None
        kept = cache.get(name)
        if (
            kept is not None
            and np.array_equal(kept[0], grid)
            and (kept[1] is queries or np.array_equal(kept[1], queries))
        ):
            return kept[2]
        matrices = kernels.query_kernel_matrices(queries, grid)
        size = sum(matrix.nbytes for matrix in matrices if matrix is not None)
        if size <= QUERY_KERNELS_KEPT_BYTES:  # threads may both make it: the same matrices
            cache[name] = (np.array(grid, dtype=float), queries, matrices)
        return matrices

    def _shadow_space(self, name: str, context: PredictionContext):
        """Space ``name`` of the references with the context's shadows: the references'
        sums from :meth:`_base_space`, plus the pairs that involve a shadow
        (:func:`~pkps_core.space.increments.increment_sums`, Eq. 1 summed over pairs, so
        exactly a fresh fit's sums), then the fit's own steps (D, MDS, the bandwidth CV
        without the shadows) and, for PKPS, the bandwidth the shadows predict best at the
        profile's budget (as :meth:`PredictionContext.space` chooses it).

        Where the references' fit approximated a bandwidth's sums (the sparse or Nyström
        path, within the error its report gives), the references' pairs keep that
        approximation and every pair with a shadow is exact: the references are placed
        where the base fit placed them, and no profile pays a fresh fit of every pair (on
        the demo store, whose three widest bandwidths take the Nyström path, that fresh
        fit was 0.4 s of every profile's 1.3 s)."""
        base = self._base_space(name, context)
        prepared = context.prepared
        features = _context_features(base, context)
        queries = prepared.query_vectors if name == "pkps" else None
        shadow_rows = context.shadows[prepared.layout.model_idx]
        position = np.searchsorted(prepared.models, base.models_)
        self_numerator, self_denominator = kernels.self_sums(
            prepared.layout, features, base.response_kernel
        )
        n = len(prepared.models)
        shadows = np.flatnonzero(context.shadows)
        pairs = None
        if base.response_kernel in ("linear", "cosine"):  # unit rows: cosine is linear
            # PKPS's grid holds the delta limit (bandwidth 0), which is DKPS's kernel:
            # DKPS takes those sums when its response vectors are PKPS's
            delta = context.shared.get(("shadow pair sums", "delta"))
            grid = np.asarray(base.bandwidth_grid_, dtype=float)
            if (
                name == "dkps"
                and delta is not None
                and len(grid) == 1
                and np.array_equal(delta[0], features)
            ):
                pairs = [delta[1]]
            elif name == "pkps" and np.array_equal(
                context.shared.get(("shadow pair sums", "pkps"), (None,))[0], grid
            ):
                pairs = context.shared.pop(("shadow pair sums", "pkps"))[1]  # all budgets' pass
            else:
                pairs = shadow_pair_sums(
                    prepared.layout,
                    features,
                    queries,
                    grid,
                    context.shadows,
                    pool=self.__dict__.get("_pool"),
                    query_kernels=self._query_kernels(name, queries, grid),
                )
            if name == "pkps" and (grid == 0).any():
                zero = int(np.flatnonzero(grid == 0)[0])
                context.shared[("shadow pair sums", "delta")] = (features, pairs[zero])
        grid_sums = []
        for k, (sigma, old) in enumerate(zip(base.bandwidth_grid_, base.kernel_sums_, strict=True)):
            full = []
            for part, kept in ((0, old.numerator), (1, old.denominator)):
                matrix = np.zeros((n, n))
                matrix[np.ix_(position, position)] = kept
                if pairs is not None:
                    with_shadows = pairs[k][part]
                    matrix[:, shadows] = with_shadows
                    matrix[shadows, :] = with_shadows.T
                    block = with_shadows[shadows]
                    matrix[np.ix_(shadows, shadows)] = 0.5 * (block + block.T)
                full.append(matrix)
            if pairs is None:
                increment = increment_sums(
                    prepared.layout,
                    features,
                    queries,
                    float(sigma),
                    shadow_rows,
                    base.response_kernel,
                    base.response_bandwidth_ if base.response_kernel == "rbf" else 1.0,
                )
                full = [full[0] + increment[0], full[1] + increment[1]]
            grid_sums.append(kernels.KernelSums(*full, self_numerator, self_denominator))
        space = copy.copy(base)
        space.cv_exclude_ = list(context.models[context.shadows])
        space.affinity_reports_ = list(base.affinity_reports_)
        space.prepared_ = prepared
        space.features_ = features
        space.query_vectors_ = queries
        space._finish(prepared, list(base.bandwidth_grid_), grid_sums)
        if name == "pkps" and context.space_params.get("query_bandwidth", "cv") == "cv":
            space = context._bandwidth_at_target_budget(space)
        return space

    def _calibrate(self, profile: Profile) -> _Calibration:
        started = time.perf_counter()
        context = self.__dict__.get("_contexts", {}).pop(profile.key, None)
        shared = self.__dict__.setdefault("_by_budget", {})
        budget_key = (profile.budget, profile.tasks)
        fitted = shared.get(budget_key, {})
        if context is None and not profile.scored and "scored context" in fitted:
            context = without_shadow_scores(fitted.pop("scored context"))
        if context is None:
            context = self._profile_context(profile)
        if profile.scored and len(self.modes) > 1:
            fitted["scored context"] = context  # the budget's responses-only profile's start
        sums, spaces = {}, {}
        for name in SPACES:
            if context.space_unavailable(name) is not None:
                continue
            if name not in fitted:  # the same shadows (scores aside) in both modes
                fitted[name] = self._shadow_space(name, context)
            space = fitted[name]
            context.shared[("space", name)] = space
            best = (
                0
                if name == "dkps"
                else int(np.argmin(np.abs(space.bandwidth_grid_ - space.query_bandwidth_)))
            )
            sums[name] = space.kernel_sums_[best]
            embedding, eigenvalues, inside = placed_coordinates(context, space)
            spaces[name] = PlacedSpace(
                models_=context.models,
                families_=context.families,
                distance_matrix_=space.distance_matrix_,
                embedding_=embedding,
                eigenvalues_=eigenvalues,
                query_bandwidth_=float(space.query_bandwidth_),
                response_kernel=space.response_kernel,
                response_bandwidth_=float(getattr(space, "response_bandwidth_", 1.0)),
                inside_=inside,
            )
        if "region" not in fitted:
            # each reference's budget copy for the region check is its first shadow: a
            # random subsample at the profile's budget, already in the space
            fitted["region"] = region_distances_among(context, first_shadows(context))[1]
        threshold = fitted["region"]
        shared[budget_key] = fitted
        context.item_sd()
        grids = dict(member_predictions(context))
        grids[METHOD] = METHODS[METHOD](context).prediction
        calibration = _Calibration(
            profile=profile,
            context=context,
            spaces=spaces,
            sums=sums,
            grids=grids,
            region_threshold=np.asarray(threshold, dtype=float),
            fit_seconds=time.perf_counter() - started,
        )
        self.profiles_[profile.key] = calibration
        return calibration

    # ------------------------------------------------------------------ predict

    def predict(
        self,
        records: pd.DataFrame,
        *,
        level: float | None = 0.9,
        rename_existing: bool = True,
    ) -> pd.DataFrame:
        """Predict every cell of the new models in ``records`` (one or many models).

        Parameters
        ----------
        records : DataFrame
            Canonical records of the new models only, with embeddings in the references'
            space (:meth:`pkps_core.store.Store.fitted_embedder` or the same precomputed
            vectors) or texts when the references were given as texts.
        level : float or None, default=0.9
            Coverage of the conformal intervals and the extrapolation warnings (None: no
            intervals).
        rename_existing : bool, default=True
            A new model named like a reference is predicted as that name (the reference
            is not used for it); its rows carry its own name in the output.

        Returns
        -------
        DataFrame with :data:`~pkps_core.predict.OUTPUT_COLUMNS` plus ``profile``: one row
        per (new model, task) of the ensemble.
        """
        return self.predict_contexts(records, level=level)[0]

    def predict_contexts(
        self, records: pd.DataFrame, *, level: float | None = 0.9
    ) -> tuple[pd.DataFrame, list[tuple[PredictionContext, list[str]]]]:
        """:meth:`predict`, and each placement run's context with its new models (for the
        report's neighbours, standings and responses)."""
        if not hasattr(self, "profiles_"):
            raise RuntimeError("the predictor is not fitted; call fit() or load it from a store")
        new, renamed = self._new_records(records)
        groups = self._profile_groups(new)
        frames, contexts = [], []
        with single_threaded_blas():  # small products: BLAS's own threads only spin
            for profile, models in groups.values():
                calibration = self._calibration(profile)
                part = new[new["model"].isin(models)]
                context = self._placement_context(calibration, part, renamed)
                frames.append(self._predict_placed(calibration, context, level, renamed))
                contexts.append((context, models))
        out = pd.concat(frames, ignore_index=True)
        out["model"] = out["model"].map(lambda m: renamed.get(m, m))
        return out.sort_values(["model", "task"], kind="stable").reset_index(drop=True), contexts

    def _profile_groups(self, new: pd.DataFrame) -> dict[str, tuple[Profile, list[str]]]:
        """The new models by profile: key -> (profile, models) (:func:`profile_of`)."""
        groups: dict[str, tuple[Profile, list[str]]] = {}
        counts = (
            new.groupby(["model", "task"], sort=True, observed=True)
            .size()
            .unstack("task", fill_value=0)
            .reindex(columns=self.tasks_, fill_value=0)
        )
        with_scores = (
            new["score"].notna().groupby(new["model"], observed=True).any()
            if "score" in new.columns
            else pd.Series(False, index=counts.index)
        )
        for model, row in zip(counts.index, counts.to_numpy(), strict=True):
            profile = profile_of(row, bool(with_scores[model]), self.tasks_, self.budgets)
            groups.setdefault(profile.key, (profile, []))[1].append(str(model))
        return groups

    def calibrate(
        self,
        records: pd.DataFrame,
        *,
        progress: Callable[[float, str], None] | None = None,
        threads: int | None = None,
    ) -> int:
        """Calibrate now, side by side on ``threads`` threads (default: as many as BLAS
        may use), every profile the new models of ``records`` need that the predictor
        holds neither in memory nor in its stored fit: a model that answered only some
        tasks needs one of its own (about a second each on the demo store), which
        :meth:`predict` would otherwise calibrate on first use, one after another. The
        same calibrations either way (a profile does not depend on the order). Returns
        how many were calibrated."""
        if not hasattr(self, "profiles_"):
            raise RuntimeError("the predictor is not fitted; call fit() or load it from a store")
        new, _ = self._new_records(records)
        stored = getattr(self, "_stored", {})
        profiles = [
            profile
            for key, (profile, _) in self._profile_groups(new).items()
            if key not in self.profiles_ and key not in stored
        ]
        if profiles:
            added_lock = "_base_lock" not in self.__dict__
            if added_lock:
                self._base_lock = threading.Lock()
            self._query_kernels_kept = {}
            try:
                with single_threaded_blas():
                    self._calibrate_all(
                        profiles,
                        progress,
                        WorkerPool(threads).threads,
                    )
            finally:
                if added_lock:
                    self.__dict__.pop("_base_lock", None)
                self.__dict__.pop("_query_kernels_kept", None)
        return len(profiles)

    def _calibration(self, profile: Profile) -> _Calibration:
        """The profile's calibration: in memory, restored from a stored fit, or fitted now
        (a profile off the grid: a model that answered only some tasks)."""
        if profile.key in self.profiles_:
            return self.profiles_[profile.key]
        if profile.key in getattr(self, "_stored", {}):  # set by state.from_state
            return self._restore(self, profile.key)
        return self._calibrate(profile)

    def _new_records(self, records: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
        """The new models' validated records in the references' columns, and the run names
        of new models named like a reference (run name -> name). Nothing is kept on the
        predictor: one fitted predictor serves concurrent requests (the app's sessions)."""
        new = validate_records(self.embed(records))
        unknown = sorted(set(new["task"].astype(str)) - set(self.tasks_))
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:5])
            raise RecordsError(
                f"task(s) {shown} are not among the references' tasks "
                f"({', '.join(map(str, self.tasks_[:8]))}); a new model is predicted on the "
                "references' tasks only — rename the tasks or add references that answered them"
            )
        renamed = {}
        family = dict(zip(self.prepared_.models, self.prepared_.families, strict=True))
        for model in sorted(set(new["model"].astype(str)) & set(self.references_)):
            # a reference predicted as new: its stored row is hidden from this run
            name = f"{model}{NEW_TAG}"
            rows = new["model"] == model
            new.loc[rows, "model"] = name
            new.loc[rows, "family"] = family[model]
            renamed[name] = model
        columns = list(self.reference_frame_.columns)
        missing = [
            c for c in ("query_embedding", "response_embedding") if c in columns and c not in new
        ]
        if missing:
            raise RecordsError(
                f"the new model's records lack {', '.join(missing)}: give every row its query "
                "and response text (the app and `report` embed them as the store's were; in "
                "Python, Store.fitted_embedder) or the vectors themselves"
            )
        return new.reindex(columns=columns), renamed  # the references' columns, NaN if absent

    def _placement_context(
        self, calibration: _Calibration, new: pd.DataFrame, renamed: dict[str, str]
    ) -> PredictionContext:
        """The calibration context with the new models added as targets, their spaces
        placed out of sample and every stored grid carried over."""
        base = calibration.context
        records = pd.concat([base.records, new], ignore_index=True)
        prepared = append_models(base.prepared, new)
        index = np.searchsorted(prepared.models, base.models)
        n = len(prepared.models)
        is_new = np.ones(n, dtype=bool)
        is_new[index] = False
        origin = np.full(n, -1)
        old_origin = np.asarray(base.origin)
        origin[index] = np.where(old_origin >= 0, index[np.maximum(old_origin, 0)], -1)
        hidden = np.isin(prepared.models, list(renamed.values()))
        context = PredictionContext(
            records=records,
            prepared=prepared,
            holdout=base.holdout,
            targets=(origin >= 0) | is_new | hidden,
            space_params=base.space_params,
            n_neighbors=base.n_neighbors,
            origin=origin,
            rows=is_new,
            # the placed spaces' coordinates are already those the calibration's KNN read
            # (placed_coordinates), extended to the new models: no MDS to redo here
            neighbours="distances" if base.neighbours == "distances" else "embedding",
        )
        context.shared["item_sd"] = base.item_sd()
        features = placement_features(prepared)  # once for both spaces
        pairs = new_model_pairs(prepared, calibration.spaces, is_new, features)
        linear = None  # each model's sums with itself, the same for linear and cosine
        allowed = context.allowed() if base.neighbours == "out-of-sample" else None
        for name, sums in calibration.sums.items():
            kernel = calibration.spaces[name].response_kernel
            if kernel in ("linear", "cosine") and linear is None:  # unit rows
                linear = kernels.self_sums(prepared.layout, features, kernel)
            context.shared[("space", name)] = place(
                calibration.spaces[name],
                sums,
                prepared,
                index,
                is_new,
                base,
                features,
                pairs.get(name),
                linear if kernel in ("linear", "cosine") else None,
                allowed,
            )
        # the answer-length feature of every fitted model is the calibration's; the new
        # models' from their own rows (trust.responses.length_features)
        fitted_lengths = pd.Series(length_features(base), index=base.models)
        lengths = pd.concat([fitted_lengths, mean_log_lengths(new)])
        context.shared["length_features"] = lengths.reindex(prepared.models).to_numpy(float)
        return context

    def _predict_placed(
        self,
        calibration: _Calibration,
        context: PredictionContext,
        level: float | None,
        renamed: dict[str, str],
    ) -> pd.DataFrame:
        is_new = np.asarray(context.rows, dtype=bool)
        index = np.flatnonzero(~is_new)
        carried = {}
        for name, grid in calibration.grids.items():
            full = np.full((len(context.models), len(context.tasks)), np.nan)
            full[index] = grid
            carried[name] = full
        for name, compute in STACK_MEMBERS.items():
            if name == "lrmc":
                continue
            prediction, notes = compute(context)
            merged = np.where(is_new[:, None], prediction, carried.get(name, prediction))
            context.cache[("method", name)] = (merged, notes)
        missing = (context.n_responses == 0) & is_new[:, None]
        if missing.any() or "lrmc" in carried:
            from pkps_core.methods.lrmc import LRMC_INITS, lrmc_missing_predictions

            prediction, notes = lrmc_missing_predictions(context)
            if "lrmc" in carried:
                prediction = np.where(is_new[:, None], prediction, carried["lrmc"])
            context.cache[("lrmc-missing", LRMC_INITS)] = (prediction, notes)
        prediction, notes = METHODS[METHOD].compute(context)
        prediction = np.where(is_new[:, None], prediction, carried[METHOD])
        context.cache[("method", METHOD)] = (prediction, notes)
        if context.space_unavailable("pkps") is None:
            pkps = context.space("pkps")
            nearest = nearest_allowed(
                pkps.distance_matrix_, context.training_references, context.allowed()
            )
            context.cache["region"] = (nearest, calibration.region_threshold)
        shape = prediction.shape
        if level is None:
            trust = {
                "lower": np.full(shape, np.nan),
                "upper": np.full(shape, np.nan),
                "extrapolation": np.zeros(shape, dtype=bool),
                "extrapolation_reason": np.full(shape, "", dtype=object),
            }
        else:
            trust = trust_columns(context, METHOD, prediction, level)
        rows = np.flatnonzero(is_new)
        n_tasks = len(context.tasks)
        prediction, trust, observed_note = _with_observed_share(
            context, rows, prediction, trust, calibration.profile.budget
        )
        note = np.asarray(notes, dtype=object)[rows].ravel()
        described = calibration.profile.describe()
        note = np.where(note == "", described, note + "; " + described)
        note = np.where(observed_note == "", note, note + "; " + observed_note)
        reference = context.reference_score[rows].copy()
        for k, i in enumerate(rows):  # a reference predicted as new: its full score is truth
            original = renamed.get(str(context.models[i]))
            if original is not None:
                reference[k] = self._reference_cells[np.searchsorted(self.references_, original)]
        return pd.DataFrame(
            {
                "model": np.repeat(context.models[rows], n_tasks),
                "task": np.tile(context.tasks, len(rows)),
                "method": METHOD,
                "prediction": prediction[rows].ravel(),
                "sample_score": context.sample[rows].ravel(),
                "n_responses": context.n_responses[rows].ravel(),
                "reference_score": reference.ravel(),
                "note": note,
                "lower": trust["lower"][rows].ravel(),
                "upper": trust["upper"][rows].ravel(),
                "extrapolation": trust["extrapolation"][rows].ravel(),
                "extrapolation_reason": np.asarray(trust["extrapolation_reason"], dtype=object)[
                    rows
                ].ravel(),
                "profile": calibration.profile.key,
            }
        )[[*OUTPUT_COLUMNS, "profile"]]


def _with_observed_share(
    context: PredictionContext,
    rows: np.ndarray,
    prediction: np.ndarray,
    trust: dict,
    budget: int,
) -> tuple[np.ndarray, dict, np.ndarray]:
    """The new models' cells that observed more of a task than their profile rehearsed.

    A cell's full score is the mean over the task's ``N`` queries. The profile's shadows
    answered ``b = min(budget, N)`` of them and were judged against their full score, so
    the profile's prediction ``p`` and interval already hold what ``b`` observed queries
    tell. A new model scored on ``n > b`` of them knows more of the task exactly: its
    unobserved part is ``N − n`` queries instead of ``N − b``, and with
    ``r = (N − n) / (N − b)`` the full score is ``r · p + (1 − r) · sample`` (the
    unobserved mean implied by ``p`` kept, the observed part taken as it is), the
    interval's bounds the same way (its width times ``r``). ``n = b`` changes nothing;
    a model that answered a whole task (``n = N``) gets its observed score with a
    zero-width interval, as the refit path's shadows (masked at the target's own counts)
    give it.

    Returns the prediction and trust columns (updated copies) and a note per new-model
    cell, row-major (``""`` where nothing changed).
    """
    n_tasks = len(context.tasks)
    queries = task_query_counts(context.records).reindex(context.tasks).to_numpy(float)
    rehearsed = np.minimum(float(budget), queries)
    records = context.records
    part = records[records["model"].isin(set(context.models[rows])) & records["score"].notna()]
    counts = part.groupby(["model", "task"], observed=True)["query_id"].nunique()
    seen = np.zeros((len(context.models), n_tasks))
    if len(counts):
        model_at = {m: i for i, m in enumerate(context.models)}
        task_at = {t: j for j, t in enumerate(context.tasks)}
        for (model, task), n in counts.items():
            seen[model_at[model], task_at[task]] = n
    seen = np.minimum(seen, queries)
    usable = (seen > rehearsed) & np.isfinite(context.sample)
    usable[np.setdiff1d(np.arange(len(context.models)), rows)] = False
    with np.errstate(invalid="ignore", divide="ignore"):
        kept = np.where(usable, (queries - seen) / (queries - rehearsed), 1.0)
    sample = np.where(usable, context.sample, 0.0)
    out = np.where(usable, kept * prediction + (1 - kept) * sample, prediction)
    trust = dict(trust)
    for bound in ("lower", "upper"):
        values = np.asarray(trust[bound], dtype=float)
        trust[bound] = np.where(usable, kept * values + (1 - kept) * sample, values)
    whole = usable & (seen >= queries)
    if whole.any():
        flags = np.asarray(trust["extrapolation"], dtype=bool).copy()
        reasons = np.asarray(trust["extrapolation_reason"], dtype=object).copy()
        flags[whole], reasons[whole] = False, ""
        trust["extrapolation"], trust["extrapolation_reason"] = flags, reasons
    note = np.full(seen.shape, "", dtype=object)
    for i, j in np.argwhere(usable):
        note[i, j] = (
            f"all {int(queries[j])} queries observed: the sample score is the full score"
            if whole[i, j]
            else f"{int(seen[i, j])} of {int(queries[j])} queries observed, "
            f"the other {int(queries[j] - seen[i, j])} predicted"
        )
    return out, trust, note[rows].ravel()


def _context_features(space, context: PredictionContext, computed=None) -> np.ndarray:
    """The response features ``space`` reads on ``context``'s responses, made once per
    context for every space that reads the same ones (PKPS and DKPS by default: the
    unit rows of 50,572 responses, 52 MB of fresh pages per space and profile on
    AlpacaEval-40's largest); ``computed``: already made for it."""
    if space.score_weight:  # they read the scores too
        return space._response_features(context.prepared) if computed is None else computed
    key = (
        "response features",
        repr(space.response_components),
        bool(space.normalize_responses),
        space.random_state,
    )
    if computed is not None:
        return context.shared.setdefault(key, computed)
    return context.cached_shared(key, lambda: space._response_features(context.prepared))


def _unfitted_space(name: str, context: PredictionContext) -> PerspectiveSpace:
    """Space ``name`` (PKPS: the RBF query kernel; DKPS: delta) with the context's
    parameters, not yet fitted."""
    from pkps_core.space import PerspectiveSpace

    kernel = {"pkps": "rbf", "dkps": "delta"}[name]
    return PerspectiveSpace(**{**context.space_params, "query_kernel": kernel})


def _jsonable(value):
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
