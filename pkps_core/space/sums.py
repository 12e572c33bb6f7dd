"""The kernel sums of Eq. (1) over all response pairs: the factorised path.

The affinity of PKPS Eq. (1),

    A_ii' = sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l) kR(x_ij, x_i'l)
            / sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l),

is a sum over all pairs of responses, i.e. ``A = (S^T (K_Q ⊙ K_R) S) / (S^T K_Q S)`` with
``S`` the response → model indicator. For a linear (or cosine) response kernel the product
kernel factorises, ``kQ(u, u') <x, x'>``, and :class:`FactorizedSums` computes the sums
exactly in O(M N p) for M unique queries, N responses and p features instead of the
O(N^2 p) of a pairwise loop. An RBF response kernel does not factorise and is summed over
blocks of response pairs (:func:`pkps_core.space.pairwise.pairwise_sums`).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import scipy.sparse as sp

from pkps_core.space import kernels
from pkps_core.space.kernels import (
    RESPONSE_KERNELS,
    KernelSums,
    ResponseLayout,
    self_sums,
)
from pkps_core.space.pairwise import pairwise_sums
from pkps_core.space.runtime import WorkerPool, borrow_buffer, single_threaded_blas

DEFAULT_BLOCK_BYTES = 1 << 27  # 128 MiB per working block
# Above this fraction of answered (query, model) slots, K_Q @ Y as one product is cheaper
# than gathering each model's kernel columns.
DENSE_TRANSFER_DENSITY = 0.5
GATHER_COLUMNS = 1024  # query-kernel columns gathered per product on the gather path, at
GATHER_BYTES = 8 << 20  # least, or as many as fit in this many bytes (measured on L and M)


def y_cache_bytes() -> int:
    """How large Y may be to be kept across bandwidths: min(4 GiB, 1/6 of RAM)."""
    try:
        return min(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 6)
    except (AttributeError, ValueError, OSError):  # no sysconf: a conservative 1 GiB
        return 1 << 30


def _model_blocks(n_models: int, bytes_per_model: int, block_bytes: int):
    """Consecutive model ranges of near-equal size whose working memory fits ``block_bytes``."""
    size = int(max(1, min(n_models, block_bytes // max(bytes_per_model, 1))))
    n_blocks = -(-n_models // size)
    edges = np.linspace(0, n_models, n_blocks + 1).round().astype(int)
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        yield int(start), int(stop)


def scatter_y(
    features: np.ndarray,
    owner: np.ndarray,
    query: np.ndarray,
    n_models: int,
    q_lo: int,
    q_hi: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Y over the queries [q_lo, q_hi), feature-major: ``Y[i, :, q - q_lo] = x`` for each
    response x of model ``owner`` to query ``q`` in the range; shape (n_models, p, span),
    written into the front of the flat buffer ``out`` when given.

    Feature-major, so that the features of a model over a query block are one contiguous
    row (the contraction's operand) and any leading subset of the features a view of it.
    """
    shape = (n_models, features.shape[1], q_hi - q_lo)
    if out is None:
        y = np.zeros(shape)
    else:
        y = out[: int(np.prod(shape))].reshape(shape)
        y.fill(0.0)
    inside = (query >= q_lo) & (query < q_hi)
    if inside.all():
        y.transpose(0, 2, 1)[owner, query - q_lo] = features
    else:
        y.transpose(0, 2, 1)[owner[inside], query[inside] - q_lo] = features[inside]
    return y


def transfer_models(
    kernel_rows,
    features: np.ndarray,
    query: np.ndarray,
    bounds: np.ndarray,
    out: np.ndarray,
    *,
    features_t=None,
    pool: WorkerPool | None = None,
) -> None:
    """The transfer of consecutive models over the columns of a query-kernel block.

    ``out[j, :, c] = Σ_r kernel_rows[query[r], c] x_r`` over the responses r of model j
    (rows ``bounds[j]:bounds[j + 1]`` of ``features``), written into ``out`` of shape
    (models, p, columns). ``kernel_rows`` is dense or ``scipy.sparse`` (a truncated
    kernel: one sparse product for all models); dense, a model that answered at least
    :data:`DENSE_TRANSFER_DENSITY` of the rows takes the product with all of them, the
    others gather their own rows. ``features_t``: a callable giving ``features.T``
    (contiguous) for the gathers; ``pool``: threads for the models (none: one by one).
    """
    k, n_rows = len(bounds) - 1, kernel_rows.shape[0]
    # reused buffers (the pool's per thread): fresh memory costs page faults each time
    # where malloc returns freed memory at once (Dask's workers)
    scratch = pool.scratch if pool is not None else WorkerPool(1).scratch
    if sp.issparse(kernel_rows):
        owner = np.repeat(np.arange(k), np.diff(bounds))
        _sparse_transfer(sp.csr_array(kernel_rows), features, query, owner, out)
        return
    if (bounds[-1] - bounds[0]) / (n_rows * max(k, 1)) >= DENSE_TRANSFER_DENSITY:
        # mostly paired: the product of all the kernel's rows beats a gather per model
        size = features.shape[1] * n_rows

        def transfer_model(j: int) -> None:
            lo, hi = bounds[j], bounds[j + 1]
            model_y = scratch(size).reshape(-1, n_rows)
            model_y.fill(0.0)
            model_y[:, query[lo:hi]] = features[lo:hi].T
            np.matmul(model_y, kernel_rows, out=out[j])

    else:
        transposed = features_t() if features_t is not None else np.ascontiguousarray(features.T)
        span = kernel_rows.shape[1]

        def transfer_model(j: int) -> None:
            lo, hi = bounds[j], bounds[j + 1]
            # K[Q_j, block], gathered a slab of columns at a time: a gather that stays in
            # cache is several times faster than one of all columns at once; X^T K is the
            # fast orientation of this product and writes the feature-major T directly
            slab = min(span, max(GATHER_COLUMNS, GATHER_BYTES // (8 * max(hi - lo, 1))))
            gathered = scratch((hi - lo) * slab)
            for c_lo in range(0, span, slab):
                c_hi = min(span, c_lo + slab)
                part = gathered[: (hi - lo) * (c_hi - c_lo)].reshape(hi - lo, c_hi - c_lo)
                np.take(kernel_rows[:, c_lo:c_hi], query[lo:hi], axis=0, out=part, mode="clip")
                np.matmul(transposed[:, lo:hi], part, out=out[j, :, c_lo:c_hi])

    if pool is None:
        for j in range(k):
            transfer_model(j)
    else:
        # the gathers are memory-bound and single-threaded: models side by side, each
        # product on one BLAS thread
        pool.map(transfer_model, range(k))


def _sparse_transfer(kernel_rows, features, query, owner, out) -> None:
    """:func:`transfer_models` for a sparse (CSR) kernel block, as one sparse product.

    Response r adds ``K[query[r], c] x_r`` to ``T[owner[r], :, c]`` for every kept entry
    of its kernel row: a sparse matrix with one entry per such (response, c) times the
    features.
    """
    indptr, indices, data = kernel_rows.indptr, kernel_rows.indices, kernel_rows.data
    out.fill(0.0)
    counts = indptr[query + 1] - indptr[query]
    total = int(counts.sum())
    if total == 0:
        return
    response = np.repeat(np.arange(len(query)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    entry = np.repeat(indptr[query], counts) + offsets
    span = out.shape[2]
    target = owner[response] * span + indices[entry]  # (model, column) of T
    rows, compact = np.unique(target, return_inverse=True)
    expand = sp.csr_array((data[entry], (compact.ravel(), response)), shape=(rows.size, len(query)))
    out.transpose(0, 2, 1)[rows // span, rows % span] = expand @ features


def project_models(factor, features, query, bounds, pool: WorkerPool | None = None):
    """``Φ[Q_j]^T X_j`` for consecutive models (rows ``bounds[j]:bounds[j + 1]``): the
    Nyström path's per-model projection, shape (models, rank, p)."""
    k = len(bounds) - 1
    projected = np.empty((k, factor.shape[1], features.shape[1]))

    def project(j: int) -> None:
        lo, hi = bounds[j], bounds[j + 1]
        np.matmul(factor[query[lo:hi]].T, features[lo:hi], out=projected[j])

    if pool is None:
        for j in range(k):
            project(j)
    else:
        pool.map(project, range(k))
    return projected


class FactorizedSums:
    """The exact factorised kernel sums of one cache, for any query kernel.

    Linear response kernel (cosine after normalising rows). Let ``Y[i, :, q] = x`` for model
    i's response x to unique query q (zero where it did not answer), feature-major with
    shape ``(n_models, p, n_queries)``, and ``S`` the ``(n_queries, n_models)`` indicator
    of who answered what. Then ``N_ii' = <Y[i], T[i']>`` with the transfer
    ``T[i'] = Y[i'] K_Q`` (:func:`transfer_models`), and ``Z = S^T K_Q S``. Work is
    blocked by queries (the columns of T) and by models; the contraction is one matrix
    product per block pair over the upper triangle only, as the sums are symmetric. Z
    costs one product with S.

    Everything that does not depend on the query kernel (Y, S) is built once, so calling
    the object for several bandwidths pays only for the products. ``K_Q`` may be a dense
    array, a ``scipy.sparse`` matrix or None (delta: T = Y).

    Parameters
    ----------
    layout : ResponseLayout
    features : ndarray (n_responses, p)
    block_bytes : int
        Memory budget of one working block.
    pool : WorkerPool, optional
        Threads for the transfers and the contraction (default: a pool of this object's).
    """

    def __init__(
        self,
        layout: ResponseLayout,
        features: np.ndarray,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        *,
        pool: WorkerPool | None = None,
    ):
        self.layout = layout
        n, n_q = layout.n_models, layout.n_queries
        self.features = np.ascontiguousarray(features, dtype=float)
        self.p = p = self.features.shape[1]
        self.pool = pool if pool is not None else WorkerPool()
        # Y of one query block takes up to 2 blocks of memory
        self.step = int(max(1, min(n_q, 2 * block_bytes // (n * max(p, 1) * 8))))
        self.block_bytes = block_bytes
        self._features_by_feature = None
        self._lock = threading.Lock()  # the lazily built arrays below
        self.query_blocks = [(lo, min(n_q, lo + self.step)) for lo in range(0, n_q, self.step)]
        self.indicator = sp.csr_array(
            (np.ones(layout.n_responses), (layout.query_idx, layout.model_idx)), shape=(n_q, n)
        )
        self._dense_indicator = None  # made for the first dense kernel (which is bigger)
        # Y does not depend on the bandwidth: kept across calls while it fits in memory
        keep = n * p * n_q * 8 <= y_cache_bytes()
        self._y_blocks = [self.y_block(lo, hi) for lo, hi in self.query_blocks] if keep else None

    def y_block(self, q_lo: int, q_hi: int) -> np.ndarray:
        """Y of every model over queries [q_lo, q_hi) (:func:`scatter_y`)."""
        layout = self.layout
        return scatter_y(
            self.features, layout.model_idx, layout.query_idx, layout.n_models, q_lo, q_hi
        )

    def _transfer(self, kernel_columns, start: int, stop: int, transfer) -> None:
        """Write T of models [start, stop) over the kernel's columns into ``transfer``."""
        bounds = self.layout.model_bounds
        lo, hi = bounds[start], bounds[stop]
        transfer_models(
            kernel_columns,
            self.features[lo:hi],
            self.layout.query_idx[lo:hi],
            bounds[start : stop + 1] - lo,
            transfer,
            features_t=lambda: self._features_t()[:, lo:hi],
            pool=self.pool,
        )

    def _features_t(self) -> np.ndarray:
        """X feature-major, made on first use of the gather path."""
        with self._lock:
            if self._features_by_feature is None:
                self._features_by_feature = np.ascontiguousarray(self.features.T)
        return self._features_by_feature

    def _denominator(self, query_kernel) -> np.ndarray:
        """Z = S^T K_Q S (S^T S for the delta kernel)."""
        s = self.indicator
        if query_kernel is None:
            return np.asarray((s.T @ s).todense())
        if sp.issparse(query_kernel):
            return np.asarray((s.T @ (query_kernel @ s)).todense())
        with self._lock:
            if self._dense_indicator is None:
                self._dense_indicator = s.toarray()
        return s.T @ self.pool.matmul(query_kernel, self._dense_indicator)

    def __call__(self, query_kernel) -> tuple[np.ndarray, np.ndarray]:
        """Numerator N and denominator Z of Eq. (1) for one query kernel (not symmetrised)."""
        layout, p = self.layout, self.p
        n, n_q = layout.n_models, layout.n_queries
        numerator = np.zeros((n, n))
        per_model = p * self.step * 8  # the transfer buffer (T) of one model
        model_blocks = list(_model_blocks(n, per_model, self.block_bytes))
        largest = max(stop - start for start, stop in model_blocks) * self.step * p
        if sp.issparse(query_kernel):
            query_kernel = sp.csr_array(query_kernel)
        with (
            single_threaded_blas(),
            borrow_buffer(largest if query_kernel is not None else 0) as buffer,
        ):
            for block, (q_lo, q_hi) in enumerate(self.query_blocks):
                span = q_hi - q_lo
                y = (
                    self._y_blocks[block]
                    if self._y_blocks is not None
                    else self.y_block(q_lo, q_hi)
                )
                kernel_columns = None
                if query_kernel is not None:
                    kernel_columns = query_kernel if span == n_q else query_kernel[:, q_lo:q_hi]
                for start, stop in model_blocks:
                    k = stop - start
                    if kernel_columns is None:
                        transfer = y[start:stop]  # delta kernel: T = Y
                    else:
                        transfer = buffer[: k * span * p].reshape(k, p, span)
                        self._transfer(kernel_columns, start, stop, transfer)
                    size = span * p
                    # rows 0..stop: the upper triangle of these columns (and their diagonal)
                    numerator[:stop, start:stop] += self.pool.inner(
                        y[:stop].reshape(stop, size), transfer.reshape(k, size)
                    )
            lower = np.tril_indices(n, -1)
            numerator[lower] = numerator.T[lower]
            return numerator, self._denominator(query_kernel)


def kernel_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernel: np.ndarray | None,
    response_kernel: str = "linear",
    response_bandwidth: float = 1.0,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    method: str = "auto",
    pool: WorkerPool | None = None,
) -> KernelSums:
    """Sum the product kernel over all response pairs of every model pair (Eq. 1).

    Parameters
    ----------
    layout : ResponseLayout
    features : ndarray of shape (n_responses, p)
        Response representations, rows aligned with ``layout``.
    query_kernel : ndarray of shape (n_queries, n_queries) or None
        Query kernel over unique queries; ``None`` is the delta kernel (DKPS).
    response_kernel : {"linear", "rbf", "cosine"}
    response_bandwidth : float
        RBF response-kernel bandwidth (ignored otherwise).
    block_bytes : int
        Memory budget of one working block.
    method : {"auto", "factorized", "pairwise"}
        ``"factorized"`` (linear/cosine only) is the exact O(M N p) path, ``"pairwise"``
        the O(N^2 p) block sum; ``"auto"`` takes the factorised one where it applies.
    pool : WorkerPool, optional
        Threads for the factorised path.

    Returns
    -------
    KernelSums
    """
    if response_kernel not in RESPONSE_KERNELS:
        raise ValueError(
            f"response_kernel must be one of {RESPONSE_KERNELS}, got {response_kernel!r}"
        )
    features, response_kernel = kernels.linear_form(features, response_kernel)
    factorizable = response_kernel == "linear"
    if method == "auto":
        method = "factorized" if factorizable else "pairwise"
    if method == "factorized" and not factorizable:
        raise ValueError("the factorized path needs a linear or cosine response kernel")
    if method == "factorized":
        numerator, denominator = FactorizedSums(layout, features, block_bytes, pool=pool)(
            query_kernel
        )
    elif method == "pairwise":
        numerator, denominator = pairwise_sums(
            layout, features, query_kernel, response_kernel, response_bandwidth, block_bytes
        )
    else:
        raise ValueError(f"method must be 'auto', 'factorized' or 'pairwise', got {method!r}")
    return KernelSums.symmetrised(
        numerator, denominator, *self_sums(layout, features, response_kernel)
    )


def sample_exact_sums(
    layout,
    features,
    query_vectors,
    bandwidth,
    models,
    *,
    pool: WorkerPool | None = None,
    response_kernel: str = "linear",
    response_bandwidth: float = 1.0,
) -> kernels.KernelSums:
    """Exact kernel sums restricted to ``models``.

    The responses of those models alone, with the query kernel over only the queries they
    answered (the delta kernel at bandwidth 0), through the exact path of the response
    kernel.
    """
    models = np.asarray(models)
    bounds = layout.model_bounds
    rows = np.concatenate([np.arange(bounds[m], bounds[m + 1]) for m in models])
    sub_models = np.repeat(np.arange(len(models)), np.diff(bounds)[models])
    queries, sub_queries = np.unique(layout.query_idx[rows], return_inverse=True)
    sub_layout = kernels.ResponseLayout.build(
        sub_models, sub_queries.ravel(), len(models), len(queries)
    )
    sub_features = np.ascontiguousarray(features[rows])
    query_kernel = (
        None
        if bandwidth <= 0 or query_vectors is None
        else kernels.query_kernel_matrix(
            kernels.squared_distances(query_vectors[queries], pool=pool), bandwidth, pool=pool
        )
    )
    return kernel_sums(
        sub_layout, sub_features, query_kernel, response_kernel, response_bandwidth, pool=pool
    )
