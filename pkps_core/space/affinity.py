"""Choosing how to compute the kernel sums of Eq. (1) for each bandwidth, with error bounds.

:class:`AffinityEngine` owns one cache's responses and query vectors, and decides for each
bandwidth which path computes its sums, and reports it:

``exact``
    The dense factorised sum of :mod:`pkps_core.space.sums` (O(M^2) kernel values
    plus O(M N p) flops).
``sparse``
    Narrow bandwidths, where all but a few per cent of the query-kernel entries are below
    :data:`SPARSE_THRESHOLD`: those entries are dropped and the sums run over the sparse
    kernel. The error is *bounded*, not estimated: with ε the threshold, each of the
    m_i m_i' pairs of two models loses less than ε of kernel mass and less than
    ε |<x, x'>| of product, so ``|ΔZ_ii'| ≤ ε m_i m_i'``, ``|ΔN_ii'| ≤ ε s_i s_i'``
    (``s_i = Σ_j ‖x_ij‖``) and ``|ΔA_ii'| ≤ ε (s_i s_i' + |A_ii'| m_i m_i') / Z_ii'``
    (Z from the kept entries, which only underestimate it). With ``β_ii' = b_ii + b_i'i'
    + 2 b_ii'`` bounding the change of D²_ii', ``|ΔD_ii'| ≤ min(√β, β / D_ii')``. The
    path is taken only when this bound, relative to max D, is within
    :data:`SPARSE_TOL` — as exact as the dense path for every practical purpose.
``nystrom``
    Wide bandwidths on caches with many unique queries: ``K_Q ≈ Φ Φ^T`` from ``rank``
    landmark queries, with the diagonal kept exact; the sums cost O(r N p). Its error is
    first *bounded* (:func:`~pkps_core.space.kernels.nystrom_bound`: the residual K_Q − Φ Φ^T is
    positive semi-definite, so its diagonal alone bounds the error of every sum); when
    that bound is too loose it is *measured*: D is recomputed exactly on a seeded sample
    of models and compared (max |ΔD| / max D over the sample). The rank doubles until the
    bound or the measurement is within ``tol``, else the exact path runs. A quick probe of
    the spectrum on a sample of queries decides whether to try at all, so narrow
    bandwidths, where the kernel is far from low rank, run exactly (or sparse).

The sparse path is tried first (deciding it needs one pass over the squared distances),
then Nyström, then the exact path. Every report says which path ran and its error (0 for
exact, else the bound or the measurement, ``SumsReport.error_kind``).

One engine, two backends. The decisions, bounds and reports are made here, once; what
costs are three primitives of a *backend*: the kernel sums of given query kernels (exact,
truncated for the sparse path, or delta), the sums of low-rank factors, and the count of
query pairs within a distance (the sparse path's density test). :class:`LocalBackend`
runs them in this process (:class:`~pkps_core.space.sums.FactorizedSums` on the engine's
:class:`~pkps_core.space.runtime.WorkerPool`, BLAS on one thread meanwhile);
:class:`~pkps_core.space.dask_engine.DaskBackend` as tasks on a cluster. A whole grid of
bandwidths (:meth:`AffinityEngine.grid_sums`) is decided in lockstep: each round asks the
backend for everything the undecided bandwidths need at once, and the exact sums wait
only for the density counts (answered without a pass), so one pass over the data serves
the exact bandwidths and the approximations together; a bandwidth whose approximation
fails its bound takes one more.

The RBF response kernel takes the exact pairwise path unless ``affinity_path="nystrom"``
asks for more: then, from :data:`~pkps_core.space.response_nystrom.RESPONSE_NYSTROM_MIN`
responses on, Nyström features of the responses put it on the factorised path above, with
its own bound or measurement (:mod:`pkps_core.space.response_nystrom`); the report's path
then reads e.g. ``exact+response-nystrom(r=512)`` and its error is the sum of both
approximations'.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np

from pkps_core.space import kernels, paired_sums, response_nystrom
from pkps_core.space.increments import increment_sums
from pkps_core.space.pairwise import pairwise_sums
from pkps_core.space.runtime import WorkerPool, single_threaded_blas
from pkps_core.space.sums import DEFAULT_BLOCK_BYTES, FactorizedSums, project_models

AFFINITY_PATHS = ("auto", "exact", "sparse", "nystrom")
SPARSE_THRESHOLD = 1e-16  # query-kernel entries below this are dropped on the sparse path
SPARSE_MAX_DENSITY = 0.02  # above this fraction of kept entries the dense product is cheaper
SPARSE_TOL = 1e-7  # largest accepted bound on max |ΔD| / max D for the sparse path
EXACT_MAX_QUERIES = 1024  # above this many unique queries, wide bandwidths try Nyström
MEASURED_MIN_QUERIES = 4096  # ... and from this many on, also accept it by a sampled check
DENSE_SQDIST_MAX_BYTES = 2 << 30
KEEP_KERNEL_MAX_BYTES = 256 << 20  # query kernels up to this size reuse one buffer
RANK_PROBE_QUERIES = 600  # (half as many on caches where only the bound can accept Nyström)
RANK_PROBE_TAIL = 1e-4  # try Nyström when half the probe keeps all but this of K_Q's trace


@dataclass(frozen=True)
class SumsReport:
    """How one bandwidth's sums were computed."""

    bandwidth: float
    path: str
    error: float
    rank: int | None = None
    error_kind: str = "exact"  # "exact" (error 0), "bound" (rigorous) or "measured" (sampled)


@dataclass(frozen=True)
class QueryKernel:
    """A query kernel whose sums a backend computes: RBF at ``bandwidth`` (0: delta), with
    the entries at squared query distance above ``cutoff`` dropped when one is given."""

    bandwidth: float
    cutoff: float | None = None


@dataclass(frozen=True, eq=False)
class LowRank:
    """The low-rank query kernel ``Φ Φ^T`` (the Nyström path) whose sums a backend computes."""

    factor: np.ndarray


@dataclass(frozen=True)
class CountWithin:
    """How many pairs of unique queries (ordered, self pairs included) are at squared
    distance at most ``cutoff``."""

    cutoff: float


class LocalBackend:
    """The engine's primitives in this process, on the engine's worker threads.

    Squared query distances are computed once and reused for every bandwidth; the
    factorised sums (:class:`~pkps_core.space.sums.FactorizedSums`) keep what does not
    depend on the query kernel across calls.
    """

    def __init__(self, engine: AffinityEngine, *, source: LocalBackend | None = None):
        self.layout = engine.layout
        self.features = engine.features
        self.query_vectors = engine.query_vectors
        self.response_kernel = engine.response_kernel
        self.response_bandwidth = engine.response_bandwidth
        self.block_bytes = engine.block_bytes
        self.pool = engine.pool if source is None else source.pool
        self._source = source  # shares its query distances (same queries)
        self._sqdist = None
        self._kernel_buffer = None
        self._factorized = None

    def sharing(self, engine: AffinityEngine) -> LocalBackend:
        """A backend over ``engine``'s features sharing this one's threads and distances."""
        return LocalBackend(engine, source=self)

    @property
    def query_sqdist(self) -> np.ndarray:
        """Squared distances between unique queries, computed once."""
        if self._sqdist is None:
            self._sqdist = (
                self._source.query_sqdist
                if self._source is not None
                else kernels.squared_distances(self.query_vectors, pool=self.pool)
            )
        return self._sqdist

    def count_within(self, cutoffs: list[float]) -> list[int]:
        return [int(np.count_nonzero(self.query_sqdist <= cutoff)) for cutoff in cutoffs]

    def sums(self, query_kernels: list[QueryKernel], factors: list[np.ndarray]):
        """N and Z (not symmetrised) of each query kernel and of each factor's ``Φ Φ^T``;
        a non-factorisable response kernel on a fully paired cache sums every exact query
        kernel in one pass (:mod:`~pkps_core.space.paired_sums`)."""
        low_rank = [self._rank(f) for f in factors]
        if self.response_kernel != "linear" and all(k.cutoff is None for k in query_kernels):
            found = paired_sums.backend_grid_sums(self, [k.bandwidth for k in query_kernels])
            if found is not None:
                return found, low_rank
        return [self._kernel_sums(k) for k in query_kernels], low_rank

    def _kernel_sums(self, request: QueryKernel):
        if request.cutoff is not None:
            kernel = kernels.truncated_rbf(self.query_sqdist, request.bandwidth, request.cutoff)
        else:
            kernel = self._query_kernel(request.bandwidth)
        if self.response_kernel == "linear":
            if self._factorized is None:
                self._factorized = FactorizedSums(
                    self.layout, self.features, self.block_bytes, pool=self.pool
                )
            return self._factorized(kernel)
        return pairwise_sums(
            self.layout,
            self.features,
            kernel,
            self.response_kernel,
            self.response_bandwidth,
            self.block_bytes,
        )

    def _query_kernel(self, bandwidth: float) -> np.ndarray | None:
        """K_Q at one bandwidth, written over the previous one (fresh memory costs page
        faults, and a kernel is not needed once its sums are done)."""
        if bandwidth <= 0:
            return None
        sq = self.query_sqdist
        if sq.nbytes > KEEP_KERNEL_MAX_BYTES:  # large: page faults are small beside the work
            return kernels.rbf_from_squared(sq, bandwidth, pool=self.pool)
        if self._kernel_buffer is None:
            self._kernel_buffer = np.empty(sq.shape)
        return kernels.rbf_from_squared(sq, bandwidth, out=self._kernel_buffer, pool=self.pool)

    def _rank(self, factor: np.ndarray):
        """N and Z of ``Φ Φ^T``: one projection ``Φ[Q_i]^T [X_i, 1]`` per model, then
        their inner products."""
        layout, p = self.layout, self.features.shape[1]
        augmented = np.hstack([self.features, np.ones((layout.n_responses, 1))])
        projected = project_models(
            factor, augmented, layout.query_idx, layout.model_bounds, self.pool
        )
        flat = projected[:, :, :p].reshape(layout.n_models, -1)
        mass = projected[:, :, p]
        return self.pool.inner(flat, flat), mass @ mass.T

    def prepare(self) -> None:
        """Nothing ahead: the query distances are computed on first use."""

    def close(self) -> None:
        """Nothing of its own: the threads are the engine's."""


Plan = Generator[object, object, tuple[kernels.KernelSums, SumsReport]]


class AffinityEngine:
    """Kernel sums of one cache for any bandwidth, by the cheapest adequate path.

    Parameters
    ----------
    layout : ResponseLayout
    features : ndarray (n_responses, p)
        Response representations (after PCA / normalisation).
    query_vectors : ndarray (n_queries, q) or None
        Unique-query embeddings; None allows only the delta kernel.
    response_kernel : {"linear", "cosine", "rbf"}
    response_bandwidth : float
    affinity_path : {"auto", "exact", "sparse", "nystrom"}
        ``"exact"`` forces the exact dense path for RBF query kernels; ``"sparse"`` tries
        the truncated kernel at any density (still only kept within its bound).
    tol : float
        Largest accepted relative error of D (bound, or measured on sampled models) for the
        Nyström path.
    block_bytes : int
    random_state : int or None
    backend : callable, optional
        Makes the backend from the engine (default :class:`LocalBackend`; for a cluster,
        :func:`pkps_core.space.dask_engine.dask_backend`).
    """

    def __init__(
        self,
        layout,
        features,
        query_vectors,
        *,
        response_kernel="linear",
        response_bandwidth=1.0,
        affinity_path="auto",
        tol=1e-3,
        block_bytes=DEFAULT_BLOCK_BYTES,
        random_state=0,
        backend: Callable[[AffinityEngine], object] | None = None,
    ):
        if affinity_path not in AFFINITY_PATHS:
            raise ValueError(
                f"affinity_path must be one of {AFFINITY_PATHS}, got {affinity_path!r}"
            )
        self.layout = layout
        self.features, self.response_kernel = kernels.linear_form(features, response_kernel)
        self.query_vectors = query_vectors
        self.response_bandwidth = response_bandwidth
        self.affinity_path = affinity_path
        self.tol = tol
        self.block_bytes = block_bytes
        self.random_state = random_state
        self._self = None
        self._response_engines: dict = {}  # rank → (engine on Nyström features, residual); "rank"
        self.pool = WorkerPool()
        self.reports: list[SumsReport] = []
        self.backend = (backend or LocalBackend)(self)

    def prepare(self) -> None:
        """Start what every pass needs (a cluster backend scatters the data), at once."""
        self.backend.prepare()

    def close(self) -> None:
        """Stop the engine's worker threads and release its backend."""
        self.pool.close()
        self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def sums(self, bandwidth: float, self_pairs: str = "include") -> kernels.KernelSums:
        """Kernel sums at one query bandwidth (0: delta kernel); appends a report."""
        return self.grid_sums([bandwidth], self_pairs)[0]

    def grid_sums(self, bandwidths, self_pairs: str = "include") -> list[kernels.KernelSums]:
        """Kernel sums at every bandwidth, decided together (module docstring); appends
        one report per bandwidth, in their order."""
        return self._run([self._plan(float(b), self_pairs) for b in bandwidths])

    def updated_sums(
        self, old_sums, old_reports, position, new_mask, self_pairs: str = "include"
    ) -> list[kernels.KernelSums]:
        """The sums after responses were added, per bandwidth of ``old_reports``.

        The sums are over response pairs, so an exact or sparse bandwidth adds only the
        pairs with a new response (:func:`~pkps_core.space.increments.increment_sums`) to
        its old sums (``old_sums``, whose models sit at ``position`` among this engine's);
        a sparse one keeps its path while its bound, re-evaluated on the updated sums,
        holds. The others are recomputed. ``new_mask`` marks the added responses.
        """

        def plan(old: kernels.KernelSums, report: SumsReport) -> Plan:
            if report.path not in ("exact", "sparse"):
                return (yield from self._plan(report.bandwidth, self_pairs))
            numerator, denominator = increment_sums(
                self.layout,
                self.features,
                self.query_vectors,
                report.bandwidth,
                new_mask,
                self.response_kernel,
                self.response_bandwidth,
                pool=self.pool,
            )
            at = np.ix_(position, position)
            numerator[at] += old.numerator
            denominator[at] += old.denominator
            updated = kernels.KernelSums(numerator, denominator, *self.self_sums())
            if report.path == "exact":
                return updated, SumsReport(report.bandwidth, "exact", 0.0)
            sparse = self._sparse_report(report.bandwidth, updated, self_pairs)
            if sparse is not None:  # the new pairs are exact, the old ones bounded
                return updated, sparse
            return (yield from self._plan(report.bandwidth, self_pairs))

        return self._run([plan(s, r) for s, r in zip(old_sums, old_reports, strict=True)])

    def self_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """The self-pair terms of every model (:func:`~pkps_core.space.kernels.self_sums`)."""
        if self._self is None:
            self._self = kernels.self_sums(self.layout, self.features, self.response_kernel)
        return self._self

    def _symmetrised(self, numerator, denominator) -> kernels.KernelSums:
        return kernels.KernelSums.symmetrised(numerator, denominator, *self.self_sums())

    _REQUESTS = (CountWithin, QueryKernel, LowRank)

    def _run(self, plans: list[Plan]) -> list[kernels.KernelSums]:
        """Advance the plans in lockstep, each round answering all they ask at once. An
        exact kernel's sums (no cutoff; they end a plan) wait while a density count is
        pending, so they join the approximations the counts lead to in one pass; a
        bandwidth whose approximation fails adds a pass of its own."""
        done: dict[int, tuple[kernels.KernelSums, SumsReport]] = {}
        asked: dict[int, object] = {}

        def advance(index: int, answer) -> None:
            try:
                asked[index] = plans[index].send(answer)
            except StopIteration as stop:
                done[index] = stop.value
                asked.pop(index, None)

        with single_threaded_blas():
            for index in range(len(plans)):
                advance(index, None)
            while asked:
                batch = sorted(asked)
                if any(isinstance(r, CountWithin) for r in asked.values()):  # exact ones wait
                    batch = [k for k in batch if getattr(asked[k], "cutoff", 0) is not None]
                for index, answer in zip(
                    batch, self._answer([asked[k] for k in batch]), strict=True
                ):
                    advance(index, answer)
        self.reports.extend(done[k][1] for k in range(len(plans)))
        return [done[k][0] for k in range(len(plans))]

    def _answer(self, requests: list) -> list:
        """The backend's answers to one round of requests, in their order."""
        of = {kind: [r for r in requests if isinstance(r, kind)] for kind in self._REQUESTS}
        answers = {
            CountWithin: iter(self.backend.count_within([r.cutoff for r in of[CountWithin]]))
        }
        if of[QueryKernel] or of[LowRank]:
            sums = self.backend.sums(of[QueryKernel], [r.factor for r in of[LowRank]])
            answers.update({QueryKernel: iter(sums[0]), LowRank: iter(sums[1])})
        return [next(answers[type(r)]) for r in requests]

    def _plan(self, bandwidth: float, self_pairs: str) -> Plan:
        """The path of one bandwidth (module docstring), as a generator: it yields what it
        needs computed (:class:`CountWithin`, :class:`QueryKernel`, :class:`LowRank`),
        receives the backend's answer, and returns the sums and their report."""
        if (
            self.response_kernel == "rbf"
            and self.affinity_path == "nystrom"
            and self.layout.n_responses >= response_nystrom.RESPONSE_NYSTROM_MIN
        ):
            found = response_nystrom.nystrom_sums(self, bandwidth, self_pairs)
            if found is not None:
                result, path, error, kind = found
                return result, SumsReport(bandwidth, path, error, None, kind)
        if bandwidth <= 0 or self.response_kernel != "linear" or self.affinity_path == "exact":
            return (yield from self._exact(bandwidth))
        n_q = self.layout.n_queries
        sq_fits = n_q * n_q * 8 <= DENSE_SQDIST_MAX_BYTES
        if self.affinity_path in ("auto", "sparse") and sq_fits:
            cutoff = 2.0 * bandwidth * bandwidth * np.log(1.0 / SPARSE_THRESHOLD)  # kQ ≥ ε
            dense = self.affinity_path == "auto" and (
                (yield CountWithin(cutoff)) > SPARSE_MAX_DENSITY * n_q * n_q
            )
            if not dense:
                result = self._symmetrised(*(yield QueryKernel(bandwidth, cutoff)))
                report = self._sparse_report(bandwidth, result, self_pairs)
                if report is not None:
                    return result, report
        wants_nystrom = self.affinity_path == "nystrom" or n_q > EXACT_MAX_QUERIES or not sq_fits
        low_rank = self._rank_estimate(bandwidth) if wants_nystrom else None
        if wants_nystrom and (
            low_rank is not None or self.affinity_path == "nystrom" or not sq_fits
        ):
            rank = max(256, 2 * (low_rank or 128))
            attempts = 0
            while rank < n_q and attempts < 3:
                attempts += 1
                factor = response_nystrom.nystrom_factor(
                    self.query_vectors,
                    bandwidth,
                    rank,
                    random_state=self.random_state,
                    pool=self.pool,
                )
                numerator, denominator = yield LowRank(factor)
                kernels.restore_self_pairs(
                    numerator, denominator, self.layout, self.features, factor
                )
                result = self._symmetrised(numerator, denominator)
                bound = kernels.nystrom_bound(
                    self.layout, self.features, result, factor, self_pairs
                )
                if bound <= self.tol:
                    return result, SumsReport(bandwidth, "nystrom", bound, factor.shape[1], "bound")
                if n_q <= MEASURED_MIN_QUERIES and sq_fits and self.affinity_path != "nystrom":
                    break  # checking on sampled models would cost about as much as exact
                error = response_nystrom.sampled_error(self, bandwidth, result, self_pairs)
                if error <= self.tol or not sq_fits:
                    return result, SumsReport(
                        bandwidth, "nystrom", error, factor.shape[1], "measured"
                    )
                rank *= 2
        return (yield from self._exact(bandwidth))

    def _exact(self, bandwidth: float) -> Plan:
        result = self._symmetrised(*(yield QueryKernel(bandwidth)))
        return result, SumsReport(bandwidth, "exact", 0.0)

    def _sparse_report(self, bandwidth, sums, self_pairs) -> SumsReport | None:
        """The sparse path's report for sums over the truncated kernel, or None when their
        bound (:func:`~pkps_core.space.kernels.truncation_bound`) exceeds :data:`SPARSE_TOL`."""
        bound = kernels.truncation_bound(
            self.layout, self.features, sums, SPARSE_THRESHOLD, self_pairs
        )
        if bound > SPARSE_TOL:
            return None
        return SumsReport(bandwidth, "sparse", bound, None, "bound")

    def _rank_estimate(self, bandwidth: float) -> int | None:
        """A starting Nyström rank from the spectrum of K_Q on a seeded query subsample.

        None when the subsample is not low rank — more than half its size is needed to
        keep all but :data:`RANK_PROBE_TAIL` of its trace: a Nyström factor would then
        need nearly every query, and the exact path is cheaper. Otherwise the rank that
        keeps all but 1e-6 of the trace (or, when that is beyond the subsample, the one
        for the probe's tail), doubled by the caller.
        """
        rng = np.random.default_rng(self.random_state)
        n_q = self.layout.n_queries
        size = RANK_PROBE_QUERIES if n_q > MEASURED_MIN_QUERIES else RANK_PROBE_QUERIES // 2
        sample = rng.choice(n_q, size=min(n_q, size), replace=False)
        sub = self.query_vectors[sample]
        values = np.linalg.eigvalsh(
            kernels.rbf_from_squared(
                kernels.squared_distances(sub, pool=self.pool), bandwidth, pool=self.pool
            )
        )[::-1]
        tail = 1.0 - np.cumsum(values) / values.sum()
        half = len(sample) // 2
        coarse = int(np.searchsorted(-tail, -RANK_PROBE_TAIL)) + 1
        if coarse > half:
            return None
        fine = int(np.searchsorted(-tail, -1e-6)) + 1
        if fine <= half:
            return fine
        # only the coarse tail is reached: worth a try where a sampled check is affordable
        return coarse if self.layout.n_queries > MEASURED_MIN_QUERIES else None
