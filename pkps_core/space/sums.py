"""The kernel sums of Eq. (1) over all response pairs: the factorised and pairwise paths.

The affinity of PKPS Eq. (1),

    A_ii' = sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l) kR(x_ij, x_i'l)
            / sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l),

is a sum over all pairs of responses, i.e. ``A = (S^T (K_Q ⊙ K_R) S) / (S^T K_Q S)`` with
``S`` the response → model indicator. For a linear (or cosine) response kernel the product
kernel factorises, ``kQ(u, u') <x, x'>``, and :class:`FactorizedSums` computes the sums
exactly in O(M N p) for M unique queries, N responses and p features instead of the
O(N^2 p) of a pairwise loop. An RBF response kernel does not factorise and is summed over
blocks of response pairs (:func:`pairwise_sums`).
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
    normalize_rows,
    self_sums,
)
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


class FactorizedSums:
    """The exact factorised kernel sums of one cache, for any query kernel.

    Linear response kernel (cosine after normalising rows). Let ``Y[i, q] = x`` for model
    i's response x to unique query q (zero where it did not answer), query-major with shape
    ``(n_models, n_queries, p)``, and ``S`` the ``(n_queries, n_models)`` indicator of who
    answered what. Then ``N_ii' = <Y[i], T[i']>`` with the transfer ``T[i'] = K_Q Y[i']``,
    and ``Z = S^T K_Q S``. Each model's T is one product ``K_Q[Q_i']^T X_i'`` over the
    kernel rows of its own queries (O(M m_i' p); K_Q is symmetric), or, for mostly paired
    models, the product of all of K_Q with Y[i']; for a sparse (truncated) K_Q all models'
    T come from one sparse product; for the delta kernel T = Y. Work is blocked by queries
    (the rows of T) and by models; the contraction is one matrix product per block pair
    over the upper triangle only, as the sums are symmetric. Z costs one product with S.

    Everything that does not depend on the query kernel (Y, S) is built once, so calling
    the object for several bandwidths pays only for the products. ``K_Q`` may be a dense
    array, a ``scipy.sparse`` matrix or None (delta).

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

    def y_block(self, q_lo: int, q_hi: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Y of models [start, stop) over queries [q_lo, q_hi): one row scatter."""
        layout = self.layout
        stop = layout.n_models if stop is None else stop
        span = q_hi - q_lo
        y = np.zeros((stop - start, span, self.p))
        lo, hi = layout.model_bounds[start], layout.model_bounds[stop]
        queries = layout.query_idx[lo:hi]
        inside = (queries >= q_lo) & (queries < q_hi)
        rows = (layout.model_idx[lo:hi] - start) * span + queries - q_lo
        if inside.all():
            y.reshape(-1, self.p)[rows] = self.features[lo:hi]
        else:
            y.reshape(-1, self.p)[rows[inside]] = self.features[lo:hi][inside]
        return y

    def _sparse_transfer(self, kernel_columns, start: int, stop: int, transfer) -> None:
        """T of models [start, stop) for a sparse kernel block, as one sparse product.

        Response r of model i (query l) adds ``K[l, q] x_r`` to ``T[i, q]`` for every kept
        entry of row l of the (symmetric) kernel: a sparse matrix with one entry per such
        (response, q) times the features.
        """
        layout = self.layout
        bounds = layout.model_bounds
        lo, hi = bounds[start], bounds[stop]
        k, span = stop - start, transfer.shape[1]
        indptr, indices, data = kernel_columns.indptr, kernel_columns.indices, kernel_columns.data
        queries = layout.query_idx[lo:hi]
        counts = indptr[queries + 1] - indptr[queries]
        total = int(counts.sum())
        if total == 0:
            transfer[:] = 0.0
            return
        response = np.repeat(np.arange(hi - lo), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        entry = np.repeat(indptr[queries], counts) + offsets
        owner = layout.model_idx[lo:hi][response] - start
        target = owner * span + indices[entry]  # row of T (model, query) in the block
        rows, compact = np.unique(target, return_inverse=True)
        expand = sp.csr_array(
            (data[entry], (compact.ravel(), response)), shape=(rows.size, hi - lo)
        )
        flat = transfer.reshape(k * span, self.p)
        flat.fill(0.0)
        flat[rows] = expand @ self.features[lo:hi]

    def _transfer(self, kernel_columns, start, stop, q_lo, q_hi, y, transfer) -> None:
        """Write T of models [start, stop) over queries [q_lo, q_hi) into ``transfer``."""
        layout, p = self.layout, self.p
        bounds, query_idx = layout.model_bounds, layout.query_idx
        k, span, n_q = stop - start, q_hi - q_lo, layout.n_queries
        if sp.issparse(kernel_columns):
            self._sparse_transfer(kernel_columns, start, stop, transfer)
            return
        if (bounds[stop] - bounds[start]) / (n_q * k) >= DENSE_TRANSFER_DENSITY:
            # mostly paired: the product of all of K_Q with Y beats a gather per model
            whole_y = y if span == n_q else None

            def transfer_model(j: int) -> None:
                model_y = (
                    whole_y[start + j]
                    if whole_y is not None
                    else self.y_block(0, n_q, start + j, start + j + 1)[0]
                )
                np.matmul(kernel_columns.T, model_y, out=transfer[j])

        else:
            features_t = self._features_t()
            pool = self.pool

            def transfer_model(j: int) -> None:
                lo, hi = bounds[start + j], bounds[start + j + 1]
                # K_Q[Q_i', block], gathered a slab of columns at a time: a gather that
                # stays in cache is several times faster than one of all columns at once.
                # X^T K is the fast orientation of this product; its small result is
                # transposed into T while still in cache.
                slab = min(span, max(GATHER_COLUMNS, GATHER_BYTES // (8 * max(hi - lo, 1))))
                out = pool.scratch(p * slab).reshape(p, slab)
                for c_lo in range(0, span, slab):
                    c_hi = min(span, c_lo + slab)
                    part = out[:, : c_hi - c_lo]
                    np.matmul(
                        features_t[:, lo:hi], kernel_columns[query_idx[lo:hi], c_lo:c_hi], out=part
                    )
                    transfer[j, c_lo:c_hi] = part.T

        # the gathers are memory-bound and single-threaded: models side by side, each
        # product on one BLAS thread
        self.pool.map(transfer_model, range(k))

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
                    if sp.issparse(kernel_columns):
                        kernel_columns = sp.csr_array(kernel_columns)
                for start, stop in model_blocks:
                    k = stop - start
                    if kernel_columns is None:
                        transfer = y[start:stop]  # delta kernel: T = Y
                    else:
                        transfer = buffer[: k * span * p].reshape(k, span, p)
                        self._transfer(kernel_columns, start, stop, q_lo, q_hi, y, transfer)
                    size = span * p
                    # rows 0..stop: the upper triangle of these columns (and their diagonal)
                    numerator[:stop, start:stop] += self.pool.inner(
                        y[:stop].reshape(stop, size), transfer.reshape(k, size)
                    )
            lower = np.tril_indices(n, -1)
            numerator[lower] = numerator.T[lower]
            return numerator, self._denominator(query_kernel)


def pairwise_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernel: np.ndarray | None,
    response_kernel: str,
    response_bandwidth: float,
    block_bytes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Any kernel pair, by blocks of response rows against all responses: O(N^2 p)."""
    n, n_resp = layout.n_models, layout.n_responses
    numerator = np.zeros((n, n))
    denominator = np.zeros((n, n))
    sq_norms = np.einsum("ij,ij->i", features, features)
    block = int(max(1, min(n_resp, block_bytes // (3 * 8 * max(n_resp, 1)))))
    col_starts = layout.model_bounds[:-1]
    for start in range(0, n_resp, block):
        stop = min(n_resp, start + block)
        rows = slice(start, stop)
        if query_kernel is None:
            kq = (layout.query_idx[rows, None] == layout.query_idx[None, :]).astype(float)
        else:
            kq = query_kernel[layout.query_idx[rows]][:, layout.query_idx]
        gram = features[rows] @ features.T
        if response_kernel == "rbf":
            sq = sq_norms[rows, None] + sq_norms[None, :] - 2.0 * gram
            np.maximum(sq, 0.0, out=sq)
            kr = np.exp(-sq / (2.0 * response_bandwidth * response_bandwidth))
        else:
            kr = gram
        product_by_model = np.add.reduceat(kq * kr, col_starts, axis=1)  # (b, n)
        mass_by_model = np.add.reduceat(kq, col_starts, axis=1)
        owner = sp.csr_matrix(
            (np.ones(stop - start), (layout.model_idx[rows], np.arange(stop - start))),
            shape=(n, stop - start),
        )
        numerator += owner @ product_by_model
        denominator += owner @ mass_by_model
    return numerator, denominator


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
    features = np.ascontiguousarray(features, dtype=float)
    if response_kernel == "cosine":
        features = normalize_rows(features)
        response_kernel = "linear"
    self_num, self_den = self_sums(layout, features, response_kernel)
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
    numerator = 0.5 * (numerator + numerator.T)
    denominator = 0.5 * (denominator + denominator.T)
    return KernelSums(numerator, denominator, self_num, self_den)


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
