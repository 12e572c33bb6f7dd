"""Query and response kernels, the PKPS affinity A and the distance D — the hot path.

The affinity of PKPS Eq. (1),

    A_ii' = sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l) kR(x_ij, x_i'l)
            / sum_{j in Q_i} sum_{l in Q_i'} kQ(u_j, u_l),

is a sum over all pairs of responses, i.e. ``A = (S^T (K_Q ⊙ K_R) S) / (S^T K_Q S)`` with
``S`` the response → model indicator. Everything here is array code over responses sorted
by model, blocked so that memory stays bounded.

For a linear (or cosine) response kernel the product kernel factorises:
``kQ(u, u') <x, x'>``, so for every unique query ``q`` and model ``i'`` we form
``T[q, i'] = sum_{l in Q_i'} kQ(u_q, u_l) x_i'l`` and contract it with the responses to
``q``; the denominator is ``S_Q^T K_Q S_Q`` with ``S_Q`` the query → model indicator. The
cost is O(M N p) for M unique queries, N responses and p features instead of the
O(N^2 p) of a pairwise loop, and it is exact. An RBF response kernel does not factorise
and is summed over blocks of response pairs.

Parallel work runs on one shared pool of our own threads while BLAS itself is held to one
thread (:func:`worker_pool`): OpenBLAS keeps its threads spinning for a while after each
product, and on a machine with few cores they slow any other threads that run meanwhile.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

RESPONSE_KERNELS = ("linear", "rbf", "cosine")
DEFAULT_BLOCK_BYTES = 1 << 27  # 128 MiB per working block
# Dropping the self pairs subtracts them from the diagonal sums; when what is left is
# below this fraction of the total, the difference has lost too many digits to use
# (1e-6 leaves ~10 significant digits) and A_ii keeps the self pairs.
SELF_PAIR_MIN_MASS = 1e-6
# Above this fraction of answered (query, model) slots, K_Q @ Y as one product is cheaper
# than gathering each model's kernel columns.
DENSE_TRANSFER_DENSITY = 0.5
GATHER_COLUMNS = 1024  # query-kernel columns gathered per product on the gather path, at
GATHER_BYTES = 8 << 20  # least, or as many as fit in this many bytes (measured on L and M)
PARALLEL_MIN_ENTRIES = 1 << 20  # kernel matrices at least this large are exponentiated in parallel
# FactorizedSums keeps Y (n_models x n_queries x p) across bandwidths up to this size
try:
    LEFT_CACHE_BYTES = min(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 6)
except (AttributeError, ValueError, OSError):  # no sysconf: a conservative 1 GiB
    LEFT_CACHE_BYTES = 1 << 30
UNDERFLOW_EXPONENT = 708.0  # exp(-708) ≈ 3.3e-308 is still a normal double
_UNDERFLOW_VALUE = float(np.exp(-UNDERFLOW_EXPONENT))


@dataclass(frozen=True)
class ResponseLayout:
    """Responses grouped by model: the index structure every kernel sum shares.

    Attributes
    ----------
    model_idx : ndarray of shape (n_responses,)
        Model of each response, non-decreasing (responses sorted by model).
    query_idx : ndarray of shape (n_responses,)
        Unique-query index of each response (queries are keyed by (task, query_id)).
    n_models, n_queries : int
    model_bounds : ndarray of shape (n_models + 1,)
        Responses of model ``i`` are ``model_bounds[i]:model_bounds[i + 1]``.
    """

    model_idx: np.ndarray
    query_idx: np.ndarray
    n_models: int
    n_queries: int
    model_bounds: np.ndarray

    @classmethod
    def build(cls, model_idx: np.ndarray, query_idx: np.ndarray, n_models: int, n_queries: int):
        model_idx = np.asarray(model_idx, dtype=np.int64)
        query_idx = np.asarray(query_idx, dtype=np.int64)
        if np.any(np.diff(model_idx) < 0):
            raise ValueError("responses must be sorted by model (model_idx non-decreasing)")
        counts = np.bincount(model_idx, minlength=n_models)
        if np.any(counts == 0):
            raise ValueError("every model needs at least one response")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        pair_keys = model_idx * max(int(n_queries), 1) + query_idx
        if np.unique(pair_keys).size != pair_keys.size:
            raise ValueError("a model answers each unique query at most once")
        return cls(model_idx, query_idx, int(n_models), int(n_queries), bounds)

    @property
    def n_responses(self) -> int:
        return int(self.model_idx.size)

    @property
    def responses_per_model(self) -> np.ndarray:
        return np.diff(self.model_bounds)


@dataclass(frozen=True)
class KernelSums:
    """Numerator and denominator of Eq. (1), with the self-pair (j = l) parts of the diagonal.

    ``numerator[i, i']`` = Σ kQ kR and ``denominator[i, i']`` = Σ kQ over all response pairs of
    models i and i'; ``self_numerator[i]`` = Σ_j kQ(u_j, u_j) kR(x_ij, x_ij) and
    ``self_denominator[i]`` = Σ_j kQ(u_j, u_j) are the terms pairing a response with itself.
    """

    numerator: np.ndarray
    denominator: np.ndarray
    self_numerator: np.ndarray
    self_denominator: np.ndarray


def squared_distances(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``a`` and ``b`` (clipped at 0).

    One matrix product of the augmented rows ``[-2a, |a|², 1]`` and ``[b, 1, |b|²]``
    writes ``|a|² + |b|² − 2⟨a, b⟩`` directly: no full-size temporaries or extra passes.
    """
    b_is_a = b is None
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    sq_a = np.einsum("ij,ij->i", a, a)
    sq_b = sq_a if b_is_a else np.einsum("ij,ij->i", b, b)
    left = np.empty((len(a), a.shape[1] + 2))
    np.multiply(a, -2.0, out=left[:, :-2])
    left[:, -2] = sq_a
    left[:, -1] = 1.0
    right = np.empty((len(b), b.shape[1] + 2))
    right[:, :-2] = b
    right[:, -2] = 1.0
    right[:, -1] = sq_b
    out = (
        parallel_matmul(left, right.T)
        if left.shape[0] * right.shape[0] > 1 << 16
        else left @ right.T
    )
    np.maximum(out, 0.0, out=out)
    if b_is_a:
        np.fill_diagonal(out, 0.0)
    return out


def rbf_from_squared(sq: np.ndarray, bandwidth: float, out: np.ndarray | None = None) -> np.ndarray:
    """``exp(-sq / (2 bandwidth^2))``; bandwidth 0 is the delta limit (1 where sq == 0).

    Large matrices are done in row chunks on as many threads as BLAS may use (numpy's
    elementwise loops release the GIL). ``out`` (same shape, float) is written and
    returned if given.
    """
    if bandwidth <= 0:
        return (sq == 0).astype(float)
    scale = -1.0 / (2.0 * bandwidth * bandwidth)
    if out is None:
        out = np.empty(sq.shape)
    if sq.ndim != 2 or sq.size < PARALLEL_MIN_ENTRIES or len(sq) < 2:
        _rbf_rows(sq, scale, out)
        return out
    threads = workers()
    if threads <= 1:
        _rbf_rows(sq, scale, out)
        return out
    edges = np.linspace(0, len(sq), 2 * threads + 1).astype(int)
    parallel_map(
        lambda i: _rbf_rows(sq[edges[i] : edges[i + 1]], scale, out[edges[i] : edges[i + 1]]),
        range(len(edges) - 1),
        threads,
    )
    return out


def _rbf_rows(sq: np.ndarray, scale: float, out: np.ndarray) -> None:
    np.multiply(sq, scale, out=out)
    # exp(-708) is about the smallest normal double; below it the values are subnormal,
    # and subnormal operands slow matrix products by an order of magnitude. They are set
    # to 0: each is < 3.3e-308, so a kernel sum over m·m' pairs changes by < m·m'·3.3e-308.
    if out.size and out.min() < -UNDERFLOW_EXPONENT:
        np.maximum(out, -UNDERFLOW_EXPONENT, out=out)
        np.exp(out, out=out)
        out[out <= _UNDERFLOW_VALUE] = 0.0
    else:
        np.exp(out, out=out)


def query_kernel_matrix(query_sqdist: np.ndarray | None, bandwidth: float) -> np.ndarray | None:
    """The query kernel over unique queries; ``None`` stands for the delta kernel.

    The delta kernel compares query *identities*, so two distinct query ids never match
    even if their embeddings coincide; bandwidth 0 therefore maps to ``None``.
    """
    if bandwidth <= 0 or query_sqdist is None:
        return None
    return rbf_from_squared(query_sqdist, bandwidth)


def self_sums(
    layout: ResponseLayout, features: np.ndarray, response_kernel: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per model, the self-pair terms Σ_j kQ(u_j, u_j) kR(x_j, x_j) and Σ_j kQ(u_j, u_j).

    kQ(u, u) = 1 for RBF and delta; kR(x, x) = 1 for an RBF response kernel, else ‖x‖²
    (rows already normalised for cosine).
    """
    if response_kernel == "rbf":
        self_kernel = np.ones(layout.n_responses)
    else:
        self_kernel = np.einsum("ij,ij->i", features, features)
    per_model_r = np.bincount(layout.model_idx, weights=self_kernel, minlength=layout.n_models)
    return per_model_r, layout.responses_per_model.astype(float)


_CONTROLLER: ThreadpoolController | None = None
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_BLAS_LIMIT_LOCK = threading.RLock()


def _controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries, found once (the search costs
    milliseconds per call)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def blas_threads() -> int:
    """How many threads BLAS may use here (1 when unknown)."""
    counts = [
        info.get("num_threads", 1)
        for info in _controller().info()
        if info.get("user_api") == "blas"
    ]
    return int(max(counts)) if counts else 1


@contextmanager
def single_threaded_blas():
    """Context in which BLAS runs on one thread (for work spread over our own threads).

    The limit is process-wide, so such sections never overlap: two interleaved ones would
    restore each other's limit in the wrong order and leave BLAS on one thread.
    """
    with _BLAS_LIMIT_LOCK, _controller().limit(limits=1, user_api="blas"):
        yield


_STATE = threading.local()


def workers() -> int:
    """Worker threads for parallel array work: BLAS's thread count outside
    :func:`worker_pool`, the count it had on entry inside."""
    return getattr(_STATE, "workers", None) or blas_threads()


@contextmanager
def worker_pool():
    """Run array work on our own threads only: BLAS on one thread, and :func:`workers`
    keeps the number BLAS had, for :func:`parallel_map` / :func:`parallel_matmul`.

    One kind of thread at a time: after a product on its own threads OpenBLAS keeps them
    spinning for a while (about 0.1 s), and they slow our workers (measured at size M:
    one transfer 141 ms right after a threaded product, 107 ms otherwise).
    """
    if getattr(_STATE, "workers", None) is not None:  # nested: already set up
        yield _STATE.workers
        return
    threads = blas_threads()
    _STATE.workers = threads
    try:
        with single_threaded_blas():
            yield threads
    finally:
        _STATE.workers = None


def parallel_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with the rows of ``a`` split over the shared pool, BLAS on one thread each
    (see :func:`worker_pool` for why not BLAS's own threads)."""
    threads = workers()
    if threads <= 1 or a.shape[0] < 2 * threads:
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]))
    edges = np.linspace(0, a.shape[0], threads + 1).round().astype(int)
    with single_threaded_blas():
        parallel_map(
            lambda i: np.matmul(a[edges[i] : edges[i + 1]], b, out=out[edges[i] : edges[i + 1]]),
            range(threads),
            threads,
        )
    return out


def parallel_inner(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` for short, very wide ``a`` and ``b`` (the contraction of the transfers),
    with the shared inner dimension split over the shared pool: each worker reads its own
    part of both once, where splitting rows would have both read all of ``b``."""
    threads = workers()
    if threads <= 1 or a.shape[1] < 2 * threads:
        return a @ b.T
    edges = np.linspace(0, a.shape[1], threads + 1).round().astype(int)
    with single_threaded_blas():
        parts = parallel_map(
            lambda i: a[:, edges[i] : edges[i + 1]] @ b[:, edges[i] : edges[i + 1]].T,
            range(threads),
            threads,
        )
    return np.sum(parts, axis=0)


def parallel_map(fn, items, threads: int) -> list:
    """``[fn(x) for x in items]`` on a shared pool of ``threads`` worker threads.

    For numpy work that releases the GIL (elementwise loops, BLAS calls). The pool is kept
    between calls: starting threads for every product costs more than small products.
    """
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE != threads:
            if _POOL is not None:
                _POOL.shutdown(wait=False)  # work already queued still runs
            _POOL = ThreadPoolExecutor(threads, thread_name_prefix="pkps")
            _POOL_SIZE = threads
        pool = _POOL
    return list(pool.map(fn, items))


def _model_blocks(n_models: int, bytes_per_model: int, block_bytes: int):
    """Consecutive model ranges of near-equal size whose working memory fits ``block_bytes``."""
    size = int(max(1, min(n_models, block_bytes // max(bytes_per_model, 1))))
    n_blocks = -(-n_models // size)
    edges = np.linspace(0, n_models, n_blocks + 1).round().astype(int)
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        yield int(start), int(stop)


_LOCAL = threading.local()
_TRANSFER_BUFFER: np.ndarray | None = None


def _transfer_buffer(size: int) -> np.ndarray:
    """The transfer buffer (T), kept between calls and fits: its first touch costs page
    faults (10-40 ms for the 70 MB of size M). At most ``DEFAULT_BLOCK_BYTES``-ish (model
    blocks are sized to it). Only used inside :func:`worker_pool`, whose lock serialises
    the callers."""
    global _TRANSFER_BUFFER
    if _TRANSFER_BUFFER is None or _TRANSFER_BUFFER.size < size:
        _TRANSFER_BUFFER = None  # release the old one first
        _TRANSFER_BUFFER = np.empty(size)
    return _TRANSFER_BUFFER[:size]


def _scratch(size: int) -> np.ndarray:
    """A per-thread scratch buffer of at least ``size`` doubles (contents undefined)."""
    buffer = getattr(_LOCAL, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _LOCAL.buffer = np.empty(size)
    return buffer[:size]


class FactorizedSums:
    """The exact factorised kernel sums of one cache, for any query kernel.

    Linear response kernel (cosine after normalising rows). Let ``Y[i, q] = x`` for model
    i's response x to unique query q (zero where it did not answer), query-major with shape
    ``(n_models, n_queries, p)``, and ``S`` the ``(n_queries, n_models)`` indicator of who
    answered what. Then ``N_ii' = <Y[i], K_Q Y[i']>`` and ``Z = S^T K_Q S``. Each model's
    ``T[i'] = K_Q Y[i']`` is one product ``K_Q[Q_i']^T X_i'`` over the kernel rows of its
    own queries (O(M m_i' p); K_Q is symmetric), or, for mostly paired models, the product
    of all of K_Q with Y[i']; for a sparse (truncated) K_Q all models' T come from one
    sparse product; for the delta kernel T = Y. Work is blocked by queries (the rows of T)
    and by models; the contraction is one matrix product per block pair over the upper
    triangle only, as the sums are symmetric. Z costs one product with the indicator.

    Everything that does not depend on the query kernel (Y, S) is built once, so calling
    the object for several bandwidths pays only for the products. ``K_Q`` may be a dense
    array, a ``scipy.sparse`` matrix or None (delta). Calls are serialised by a lock: the
    transfer buffer is shared between calls.
    """

    def __init__(
        self,
        layout: ResponseLayout,
        features: np.ndarray,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
    ):
        self.layout = layout
        n, n_q = layout.n_models, layout.n_queries
        self.features = np.ascontiguousarray(features, dtype=float)
        self.p = p = self.features.shape[1]
        # Y of one query block takes up to 2 blocks of memory
        self.step = int(max(1, min(n_q, 2 * block_bytes // (n * max(p, 1) * 8))))
        self.block_bytes = block_bytes
        self._features_by_feature = None
        self._lock = threading.Lock()
        self.query_blocks = [(lo, min(n_q, lo + self.step)) for lo in range(0, n_q, self.step)]
        self.indicator = sp.csr_array(
            (np.ones(layout.n_responses), (layout.query_idx, layout.model_idx)), shape=(n_q, n)
        )
        self._dense_indicator = None  # made for the first dense kernel (which is bigger)
        # Y does not depend on the bandwidth: kept across calls while it fits in memory
        keep = n * p * n_q * 8 <= LEFT_CACHE_BYTES
        self._lefts = [self._left(lo, hi) for lo, hi in self.query_blocks] if keep else None

    def _left(self, q_lo: int, q_hi: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Y of models [start, stop) over queries [q_lo, q_hi): one row scatter."""
        layout = self.layout
        stop = layout.n_models if stop is None else stop
        span = q_hi - q_lo
        left = np.zeros((stop - start, span, self.p))
        lo, hi = layout.model_bounds[start], layout.model_bounds[stop]
        queries = layout.query_idx[lo:hi]
        inside = (queries >= q_lo) & (queries < q_hi)
        rows = (layout.model_idx[lo:hi] - start) * span + queries - q_lo
        if inside.all():
            left.reshape(-1, self.p)[rows] = self.features[lo:hi]
        else:
            left.reshape(-1, self.p)[rows[inside]] = self.features[lo:hi][inside]
        return left

    def _sparse_transfer(self, columns, start: int, stop: int, right: np.ndarray) -> None:
        """T of models [start, stop) for a sparse kernel block, as one sparse product.

        Response r of model i (query l) adds ``K[l, q] x_r`` to ``T[i, q]`` for every kept
        entry of row l of the (symmetric) kernel: a sparse matrix with one entry per such
        (response, q) times the features.
        """
        layout = self.layout
        bounds = layout.model_bounds
        lo, hi = bounds[start], bounds[stop]
        k, span = stop - start, right.shape[1]
        indptr, indices, data = columns.indptr, columns.indices, columns.data
        queries = layout.query_idx[lo:hi]
        counts = indptr[queries + 1] - indptr[queries]
        total = int(counts.sum())
        if total == 0:
            right[:] = 0.0
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
        flat = right.reshape(k * span, self.p)
        flat.fill(0.0)
        flat[rows] = expand @ self.features[lo:hi]

    def _transfer(self, columns, start: int, stop: int, q_lo: int, q_hi: int, left):
        layout, p = self.layout, self.p
        bounds, query_idx = layout.model_bounds, layout.query_idx
        k, span, n_q = stop - start, q_hi - q_lo, layout.n_queries
        right = _transfer_buffer(k * span * p).reshape(k, span, p)
        if sp.issparse(columns):
            self._sparse_transfer(columns, start, stop, right)
            return right
        if (bounds[stop] - bounds[start]) / (n_q * k) >= DENSE_TRANSFER_DENSITY:
            # mostly paired: the product of all of K_Q with Y beats a gather per model
            full = left if span == n_q else None

            def one(j: int) -> None:
                model_left = (
                    full[start + j]
                    if full is not None
                    else self._left(0, n_q, start + j, start + j + 1)[0]
                )
                np.matmul(columns.T, model_left, out=right[j])

        else:
            features_t = self._features_t()

            def one(j: int) -> None:
                lo, hi = bounds[start + j], bounds[start + j + 1]
                # K_Q[Q_i', block], gathered a slab of columns at a time: a gather that
                # stays in cache is several times faster than one of all columns at once.
                # X^T K is the fast orientation of this product; its small result is
                # transposed into T while still in cache.
                slab = min(span, max(GATHER_COLUMNS, GATHER_BYTES // (8 * max(hi - lo, 1))))
                out = _scratch(p * slab).reshape(p, slab)
                for c_lo in range(0, span, slab):
                    c_hi = min(span, c_lo + slab)
                    part = out[:, : c_hi - c_lo]
                    np.matmul(features_t[:, lo:hi], columns[query_idx[lo:hi], c_lo:c_hi], out=part)
                    right[j, c_lo:c_hi] = part.T

        threads = workers()
        if threads > 1 and k > 1:
            # the gathers are memory-bound and single-threaded: run models side by side,
            # each product on one BLAS thread (as many workers as BLAS may use)
            with single_threaded_blas():
                parallel_map(one, range(k), threads)
        else:
            for j in range(k):
                one(j)
        return right

    def _features_t(self) -> np.ndarray:
        """X feature-major, made on first use of the gather path."""
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
        if self._dense_indicator is None:
            self._dense_indicator = s.toarray()
        return s.T @ parallel_matmul(query_kernel, self._dense_indicator)

    def __call__(self, query_kernel) -> tuple[np.ndarray, np.ndarray]:
        with self._lock, worker_pool():
            return self._call(query_kernel)

    def _call(self, query_kernel) -> tuple[np.ndarray, np.ndarray]:
        layout, p = self.layout, self.p
        n, n_q = layout.n_models, layout.n_queries
        numerator = np.zeros((n, n))
        per_model = p * self.step * 8  # the transfer buffer (T) of one model
        model_blocks = list(_model_blocks(n, per_model, self.block_bytes))
        if sp.issparse(query_kernel):
            query_kernel = sp.csr_array(query_kernel)
        for block, (q_lo, q_hi) in enumerate(self.query_blocks):
            span = q_hi - q_lo
            left = self._lefts[block] if self._lefts is not None else self._left(q_lo, q_hi)
            columns = None
            if query_kernel is not None:
                columns = query_kernel if span == n_q else query_kernel[:, q_lo:q_hi]
                if sp.issparse(columns):
                    columns = sp.csr_array(columns)
            for start, stop in model_blocks:
                k = stop - start
                if columns is None:
                    right = left[start:stop]  # delta kernel: T = Y
                else:
                    right = self._transfer(columns, start, stop, q_lo, q_hi, left)
                size = span * p
                # rows 0..stop: the upper triangle of these columns (and their diagonal block)
                numerator[:stop, start:stop] += parallel_inner(
                    left[:stop].reshape(stop, size), right.reshape(k, size)
                )
        lower = np.tril_indices(n, -1)
        numerator[lower] = numerator.T[lower]
        return numerator, self._denominator(query_kernel)


def _factorized_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernel,
    block_bytes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Linear response kernel, any query kernel: the exact factorised sum
    (:class:`FactorizedSums`)."""
    return FactorizedSums(layout, features, block_bytes)(query_kernel)


def _pairwise_sums(
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


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Unit-normalise rows; all-zero rows stay zero."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return features / np.where(norms > 0, norms, 1.0)


def kernel_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernel: np.ndarray | None,
    response_kernel: str = "linear",
    response_bandwidth: float = 1.0,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    method: str = "auto",
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
        numerator, denominator = _factorized_sums(layout, features, query_kernel, block_bytes)
    elif method == "pairwise":
        numerator, denominator = _pairwise_sums(
            layout, features, query_kernel, response_kernel, response_bandwidth, block_bytes
        )
    else:
        raise ValueError(f"method must be 'auto', 'factorized' or 'pairwise', got {method!r}")
    numerator = 0.5 * (numerator + numerator.T)
    denominator = 0.5 * (denominator + denominator.T)
    return KernelSums(numerator, denominator, self_num, self_den)


def affinity_from_sums(
    sums: KernelSums, self_pairs: str = "include"
) -> tuple[np.ndarray, np.ndarray]:
    """The affinity A of Eq. (1) from kernel sums.

    Parameters
    ----------
    sums : KernelSums
    self_pairs : {"include", "exclude"}
        ``"include"`` is Eq. (1) as written (a V-statistic: A_ii pairs each response with
        itself). ``"exclude"`` drops the j = l terms from A_ii (a U-statistic, as in unbiased
        MMD). Where a model has (next to) no other kernel mass on its own diagonal (one
        response; the delta kernel, where every within-model pair is a self pair; or a
        bandwidth so narrow that the rest is below ``SELF_PAIR_MIN_MASS`` of the total) the
        excluded estimate is undefined or numerically meaningless and the included one is
        kept.

    Returns
    -------
    affinity : ndarray of shape (n_models, n_models)
        NaN where two models share no kernel mass (e.g. no common query under delta).
    fallback : ndarray of bool, shape (n_models,)
        Models whose diagonal kept the self pairs although ``"exclude"`` was asked.
    """
    if self_pairs not in ("include", "exclude"):
        raise ValueError(f"self_pairs must be 'include' or 'exclude', got {self_pairs!r}")
    numerator = sums.numerator.copy()
    denominator = sums.denominator.copy()
    n = numerator.shape[0]
    fallback = np.zeros(n, dtype=bool)
    if self_pairs == "exclude":
        diag = np.arange(n)
        rest_den = denominator[diag, diag] - sums.self_denominator
        usable = rest_den > SELF_PAIR_MIN_MASS * np.maximum(denominator[diag, diag], 1.0)
        fallback = ~usable
        numerator[diag[usable], diag[usable]] -= sums.self_numerator[usable]
        denominator[diag[usable], diag[usable]] = rest_den[usable]
    with np.errstate(invalid="ignore", divide="ignore"):
        affinity = np.where(
            denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan
        )
    return affinity, fallback


def distance_from_affinity(affinity: np.ndarray) -> tuple[np.ndarray, int]:
    """D with D²_ii' = A_ii + A_i'i' − 2 A_ii', clipped at 0.

    Model pairs without kernel mass (NaN affinity) have no measured distance; they are set
    to the largest measured distance (treated as far apart) and counted.

    Returns
    -------
    distance : ndarray of shape (n_models, n_models)
    n_undefined_pairs : int
    """
    diag = np.diag(affinity)
    squared = diag[:, None] + diag[None, :] - 2.0 * affinity
    np.fill_diagonal(squared, 0.0)
    undefined = np.isnan(squared)
    n_undefined = int(undefined[np.triu_indices_from(undefined, 1)].sum())
    if n_undefined:
        finite = squared[~undefined]
        fill = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        squared = np.where(undefined, fill, squared)
        np.fill_diagonal(squared, 0.0)
    np.maximum(squared, 0.0, out=squared)
    distance = np.sqrt(squared)
    distance = 0.5 * (distance + distance.T)
    return distance, n_undefined
