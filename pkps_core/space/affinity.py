"""Choosing how to compute the kernel sums of Eq. (1) for each bandwidth, with error bounds.

:class:`AffinityEngine` owns one cache's responses and query vectors. Squared query
distances are computed once and reused for every bandwidth. For each bandwidth it picks a
path and reports it:

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
    first *bounded* (:meth:`AffinityEngine.nystrom_bound`: the residual K_Q − Φ Φ^T is
    positive semi-definite, so its diagonal alone bounds the error of every sum); when
    that bound is too loose it is *measured*: D is recomputed exactly on a seeded sample
    of models and compared (max |ΔD| / max D over the sample). The rank doubles until the
    bound or the measurement is within ``tol``, else the exact path runs. A quick probe of
    the spectrum on a sample of queries decides whether to try at all, so narrow
    bandwidths, where the kernel is far from low rank, run exactly (or sparse).

The sparse path is tried first (deciding it needs one pass over the squared distances),
then Nyström, then the exact path. Every report says which path ran and its error (0 for
exact, else the bound or the measurement, ``SumsReport.error_kind``).

Each engine runs its work on a :class:`~pkps_core.space.runtime.WorkerPool` of its own with
BLAS on one thread meanwhile, so independent fits never wait for each other.

The RBF response kernel takes the exact pairwise path unless ``method="nystrom"`` asks
for more: then, from :data:`~pkps_core.space.response_nystrom.RESPONSE_NYSTROM_MIN`
responses on, Nyström features of the responses put it on the factorised path above, with
its own bound or measurement (:mod:`pkps_core.space.response_nystrom`); the report's path
then reads e.g. ``exact+response-nystrom(r=512)`` and its error is the sum of both
approximations'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pkps_core.space import kernels, response_nystrom
from pkps_core.space.runtime import WorkerPool, single_threaded_blas
from pkps_core.space.sums import (
    DEFAULT_BLOCK_BYTES,
    FactorizedSums,
    kernel_sums,
    sample_exact_sums,
)

METHODS = ("auto", "exact", "sparse", "nystrom")
SPARSE_THRESHOLD = 1e-16  # query-kernel entries below this are dropped on the sparse path
SPARSE_MAX_DENSITY = 0.02  # above this fraction of kept entries the dense product is cheaper
SPARSE_TOL = 1e-7  # largest accepted bound on max |ΔD| / max D for the sparse path
EXACT_MAX_QUERIES = 1024  # above this many unique queries, wide bandwidths try Nyström
MEASURED_MIN_QUERIES = 4096  # ... and from this many on, also accept it by a sampled check
DENSE_SQDIST_MAX_BYTES = 2 << 30
KEEP_KERNEL_MAX_BYTES = 256 << 20  # query kernels up to this size reuse one buffer
VERIFY_MODELS = 8
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


def _rank_path_sums(layout, features, factor, pool: WorkerPool):
    """Low-rank query kernel ``Φ Φ^T``: exact diagonal restored afterwards."""
    n = layout.n_models
    p = features.shape[1]
    width = p + 1
    augmented = np.hstack([features, np.ones((layout.n_responses, 1))])
    rank = factor.shape[1]
    projected = np.empty((n, rank, width))
    bounds = layout.model_bounds

    def project(model: int) -> None:
        lo, hi = bounds[model], bounds[model + 1]
        np.matmul(factor[layout.query_idx[lo:hi]].T, augmented[lo:hi], out=projected[model])

    with single_threaded_blas():
        pool.map(project, range(n))
        flat = projected[:, :, :p].reshape(n, rank * p)
        numerator = pool.inner(flat, flat)
    mass = projected[:, :, p]
    denominator = mass @ mass.T
    # The pair of a response with itself has kQ = 1 exactly; Φ Φ^T only approximates it.
    diag_approx = np.einsum("ij,ij->i", factor, factor)[layout.query_idx]
    correction = 1.0 - diag_approx
    sq_norms = np.einsum("ij,ij->i", features, features)
    idx = np.arange(n)
    numerator[idx, idx] += np.bincount(layout.model_idx, correction * sq_norms, minlength=n)
    denominator[idx, idx] += np.bincount(layout.model_idx, correction, minlength=n)
    return numerator, denominator


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
    method : {"auto", "exact", "sparse", "nystrom"}
        ``"exact"`` forces the exact dense path for RBF query kernels; ``"sparse"`` tries
        the truncated kernel at any density (still only kept within its bound).
    tol : float
        Largest accepted relative error of D (bound, or measured on sampled models) for the
        Nyström path.
    block_bytes : int
    random_state : int or None
    """

    def __init__(
        self,
        layout,
        features,
        query_vectors,
        *,
        response_kernel="linear",
        response_bandwidth=1.0,
        method="auto",
        tol=1e-3,
        block_bytes=DEFAULT_BLOCK_BYTES,
        random_state=0,
    ):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.layout = layout
        self.features = np.ascontiguousarray(features, dtype=float)
        if response_kernel == "cosine":
            self.features = kernels.normalize_rows(self.features)
            response_kernel = "linear"
        self.query_vectors = query_vectors
        self.response_kernel = response_kernel
        self.response_bandwidth = response_bandwidth
        self.method = method
        self.tol = tol
        self.block_bytes = block_bytes
        self.random_state = random_state
        self._sqdist = None
        self._kernel_buffer = None
        self._factorized = None
        self._self = None
        self._response_engines: dict = {}  # rank → (engine on Nyström features, residual); "rank"
        self.pool = WorkerPool()
        self.reports: list[SumsReport] = []

    @property
    def query_sqdist(self) -> np.ndarray:
        """Squared distances between unique queries, computed once."""
        if self._sqdist is None:
            self._sqdist = kernels.squared_distances(self.query_vectors, pool=self.pool)
        return self._sqdist

    @property
    def factorized(self) -> FactorizedSums:
        """The exact factorised sums (linear response kernel), built once per engine."""
        if self._factorized is None:
            self._factorized = FactorizedSums(
                self.layout, self.features, self.block_bytes, pool=self.pool
            )
        return self._factorized

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

    def _exact(self, bandwidth: float) -> kernels.KernelSums:
        query_kernel = self._query_kernel(bandwidth)
        if self.response_kernel == "linear":
            return self._wrap(*self.factorized(query_kernel))
        return kernel_sums(
            self.layout,
            self.features,
            query_kernel,
            self.response_kernel,
            self.response_bandwidth,
            block_bytes=self.block_bytes,
            pool=self.pool,
        )

    def distance_bound(
        self,
        sums: kernels.KernelSums,
        numerator_error: np.ndarray,
        denominator_error: np.ndarray,
        self_pairs: str = "include",
        *,
        one_sided: bool = False,
    ) -> float:
        """Bound on max |ΔD| / max D given bounds on the errors of the kernel sums.

        ``|N − Ñ| ≤ numerator_error`` and ``|Z − Z̃| ≤ denominator_error`` entrywise (with
        ``Z ≥ Z̃`` when ``one_sided``) give ``|A − Ã| ≤ (ΔN + |Ã| ΔZ) / (Z̃ − ΔZ)`` (``/ Z̃``
        when one-sided), then ``β_ii' = b_ii + b_i'i' + 2 b_ii'`` bounds the change of D²_ii'
        and ``|ΔD_ii'| ≤ min(√β, β / D̃_ii')``. Infinite where a pair's kept mass cannot
        cover its error.
        """
        layout = self.layout
        affinity, fallback = kernels.affinity_from_sums(sums, self_pairs)
        kept = sums.denominator.copy()
        if self_pairs == "exclude":
            diag = np.arange(layout.n_models)
            use = ~fallback
            kept[diag[use], diag[use]] -= sums.self_denominator[use]
        if not one_sided:
            kept = kept - denominator_error
        if not np.all(kept > 0):
            return float("inf")
        per_pair = (numerator_error + np.abs(affinity) * denominator_error) / kept
        diag = np.diag(per_pair)
        beta = diag[:, None] + diag[None, :] + 2.0 * per_pair
        distance = kernels.distance_from_affinity(affinity)[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.minimum(np.sqrt(beta), np.where(distance > 0, beta / distance, np.inf))
        off = ~np.eye(layout.n_models, dtype=bool)
        scale = distance[off].max() if layout.n_models > 1 else 0.0
        if scale <= 0:
            return float("inf")
        return float(change[off].max() / scale)

    def truncation_bound(
        self, sums: kernels.KernelSums, threshold: float, self_pairs: str = "include"
    ) -> float:
        """Bound on max |ΔD| / max D from dropping query-kernel entries below ``threshold``.

        Each of the m_i m_i' pairs loses less than ``threshold`` of kernel mass and less
        than ``threshold · |<x, x'>|`` of product (module docstring, ``sparse``); ``sums``
        are those of the truncated kernel, whose Z only underestimates the true one.
        """
        layout = self.layout
        counts = layout.responses_per_model.astype(float)
        norms = np.sqrt(np.einsum("ij,ij->i", self.features, self.features))
        mass = np.bincount(layout.model_idx, norms, minlength=layout.n_models)
        return self.distance_bound(
            sums,
            threshold * np.outer(mass, mass),
            threshold * np.outer(counts, counts),
            self_pairs,
            one_sided=True,
        )

    def nystrom_bound(
        self, sums: kernels.KernelSums, factor: np.ndarray, self_pairs: str = "include"
    ) -> float:
        """Bound on max |ΔD| / max D of the Nyström sums (module docstring, ``nystrom``).

        The residual ``E = K_Q − Φ Φ^T`` is positive semi-definite, and so is ``E ⊙ X X^T``;
        with ``e_q = E_qq`` and ``t_i = Σ_j e_{q_ij}``, ``u_i = Σ_j e_{q_ij} ‖x_ij‖²``,
        Cauchy–Schwarz and ``1^T B 1 ≤ m tr B`` give ``|ΔZ_ii'| ≤ √(m_i t_i m_i' t_i')`` and
        ``|ΔN_ii'| ≤ √(m_i u_i m_i' u_i')`` (the exact self pairs only shrink the diagonal's
        error). Infinite when rounding made some ``e_q`` clearly negative.
        """
        layout = self.layout
        residual = 1.0 - np.einsum("ij,ij->i", factor, factor)
        if residual.min() < -1e-9:
            return float("inf")
        residual = np.maximum(residual, 0.0)[layout.query_idx]
        counts = layout.responses_per_model.astype(float)
        sq_norms = np.einsum("ij,ij->i", self.features, self.features)
        t = counts * np.bincount(layout.model_idx, residual, minlength=layout.n_models)
        u = counts * np.bincount(layout.model_idx, residual * sq_norms, minlength=layout.n_models)
        return self.distance_bound(
            sums, np.sqrt(np.outer(u, u)), np.sqrt(np.outer(t, t)), self_pairs
        )

    def _sparse(self, bandwidth, self_pairs):
        """Sums over the kernel truncated at SPARSE_THRESHOLD, with their bound; or None.

        The kept entries are found from the squared distances (kQ ≥ ε ⟺ d² ≤ 2σ² ln(1/ε)),
        so neither the dense kernel nor a pass over it is needed when too few are kept.
        """
        sq = self.query_sqdist
        cutoff = 2.0 * bandwidth * bandwidth * np.log(1.0 / SPARSE_THRESHOLD)
        keep = sq <= cutoff
        if self.method == "auto" and np.count_nonzero(keep) > SPARSE_MAX_DENSITY * keep.size:
            return None
        rows, cols = np.nonzero(keep)  # row-major order: the CSR layout as it comes
        n_q = self.layout.n_queries
        values = np.exp(sq[rows, cols] * (-1.0 / (2.0 * bandwidth * bandwidth)))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_q))])
        truncated = sp.csr_array((values, cols, indptr), shape=(n_q, n_q))
        result = self._wrap(*self.factorized(truncated))
        bound = self.truncation_bound(result, SPARSE_THRESHOLD, self_pairs)
        if bound > SPARSE_TOL:
            return None
        self.reports.append(SumsReport(bandwidth, "sparse", bound, None, "bound"))
        return result

    def _self_sums(self):
        if self._self is None:
            self._self = kernels.self_sums(self.layout, self.features, self.response_kernel)
        return self._self

    def _wrap(self, numerator, denominator) -> kernels.KernelSums:
        self_num, self_den = self._self_sums()
        numerator = 0.5 * (numerator + numerator.T)
        denominator = 0.5 * (denominator + denominator.T)
        return kernels.KernelSums(numerator, denominator, self_num, self_den)

    def _rank_sums(self, factor: np.ndarray):
        """N and Z for the low-rank query kernel ``Φ Φ^T`` (the Nyström path)."""
        return _rank_path_sums(self.layout, self.features, factor, self.pool)

    def close(self) -> None:
        """Stop the engine's worker threads."""
        self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _nystrom_factor(self, bandwidth: float, rank: int) -> np.ndarray:
        rng = np.random.default_rng(self.random_state)
        n_q = self.layout.n_queries
        landmarks = np.sort(rng.choice(n_q, size=min(rank, n_q), replace=False))
        cross = kernels.rbf_from_squared(
            kernels.squared_distances(
                self.query_vectors, self.query_vectors[landmarks], pool=self.pool
            ),
            bandwidth,
            pool=self.pool,
        )
        values, vectors = np.linalg.eigh(cross[landmarks])
        keep = values > 1e-10 * values.max()
        return self.pool.matmul(cross, vectors[:, keep] / np.sqrt(values[keep]))

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

    def _verify(self, bandwidth: float, sums: kernels.KernelSums, self_pairs: str) -> float:
        """Max relative error of D on a seeded sample of models, against the exact sums."""
        rng = np.random.default_rng(self.random_state)
        n = self.layout.n_models
        sample = np.sort(rng.choice(n, size=min(VERIFY_MODELS, n), replace=False))
        exact = sample_exact_sums(
            self.layout,
            self.features,
            self.query_vectors,
            bandwidth,
            sample,
            pool=self.pool,
            response_kernel=self.response_kernel,
            response_bandwidth=self.response_bandwidth,
        )
        approx = kernels.KernelSums(
            sums.numerator[np.ix_(sample, sample)],
            sums.denominator[np.ix_(sample, sample)],
            sums.self_numerator[sample],
            sums.self_denominator[sample],
        )
        d_exact = kernels.distance_from_affinity(kernels.affinity_from_sums(exact, self_pairs)[0])[
            0
        ]
        d_approx = kernels.distance_from_affinity(
            kernels.affinity_from_sums(approx, self_pairs)[0]
        )[0]
        scale = np.abs(d_exact[np.triu_indices(len(sample), 1)]).max()
        if scale == 0:
            return 0.0
        return float(np.abs(d_approx - d_exact).max() / scale)

    def sums(self, bandwidth: float, self_pairs: str = "include") -> kernels.KernelSums:
        """Kernel sums at one query bandwidth (0: delta kernel); appends a report.

        The work runs on the engine's worker threads with BLAS on one thread
        (:mod:`pkps_core.space.runtime`).
        """
        with single_threaded_blas():
            return self._sums(float(bandwidth), self_pairs)

    def _sums(self, bandwidth: float, self_pairs: str) -> kernels.KernelSums:
        if (
            self.response_kernel == "rbf"
            and self.method == "nystrom"
            and self.layout.n_responses >= response_nystrom.RESPONSE_NYSTROM_MIN
        ):
            found = response_nystrom.nystrom_sums(self, bandwidth, self_pairs)
            if found is not None:
                result, path, error, kind = found
                self.reports.append(SumsReport(bandwidth, path, error, None, kind))
                return result
        if bandwidth <= 0 or self.response_kernel != "linear" or self.method == "exact":
            self.reports.append(SumsReport(bandwidth, "exact", 0.0))
            return self._exact(bandwidth)
        n_q = self.layout.n_queries
        sq_fits = n_q * n_q * 8 <= DENSE_SQDIST_MAX_BYTES
        if self.method in ("auto", "sparse") and sq_fits:
            result = self._sparse(bandwidth, self_pairs)
            if result is not None:
                return result
        wants_nystrom = self.method == "nystrom" or n_q > EXACT_MAX_QUERIES or not sq_fits
        low_rank = self._rank_estimate(bandwidth) if wants_nystrom else None
        if wants_nystrom and (low_rank is not None or self.method == "nystrom" or not sq_fits):
            rank = max(256, 2 * (low_rank or 128))
            attempts = 0
            while rank < n_q and attempts < 3:
                attempts += 1
                factor = self._nystrom_factor(bandwidth, rank)
                result = self._wrap(*self._rank_sums(factor))
                bound = self.nystrom_bound(result, factor, self_pairs)
                if bound <= self.tol:
                    self.reports.append(
                        SumsReport(bandwidth, "nystrom", bound, factor.shape[1], "bound")
                    )
                    return result
                if n_q <= MEASURED_MIN_QUERIES and sq_fits and self.method != "nystrom":
                    break  # checking on sampled models would cost about as much as exact
                error = self._verify(bandwidth, result, self_pairs)
                if error <= self.tol or not sq_fits:
                    self.reports.append(
                        SumsReport(bandwidth, "nystrom", error, factor.shape[1], "measured")
                    )
                    return result
                rank *= 2
        self.reports.append(SumsReport(bandwidth, "exact", 0.0))
        return self._exact(bandwidth)
