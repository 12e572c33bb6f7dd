"""The kernel sums of Eq. (1) as Dask tasks, for caches that outgrow one machine.

:class:`DaskAffinityEngine` is an :class:`~pkps_core.space.affinity.AffinityEngine` whose
costly parts run on a ``distributed`` cluster; the choice of path per bandwidth (exact /
sparse / Nyström, their bounds and the sampled check) is the local engine's own code, so
both take the same path and give the same D.

The responses are scattered once, in consecutive model blocks (``ModelBlock``), with the
query vectors. For the linear / cosine response kernel, the sums of model blocks A ≤ B
are split over query blocks a (the rows of the transfer ``T = K_Q Y``): one task holds
the kernel slab ``K_Q[a, Q_B]`` (computed there from the query vectors, dense, truncated
for the sparse path and then multiplied as CSC where few entries are kept; for the delta
kernel ``T = Y``), the transfer of B's models over ``a`` and A's responses to ``a``,
and returns the partial |A| × |B| numerator and denominator; the partial sums over the
query blocks are added in a tree. The RBF
response kernel (no factorisation) is one task per block pair over its response pairs,
in row chunks. Nyström: one projection ``Φ[Q_i]^T X_i`` task per model block, then one
inner-product task per block pair. Each task's working memory is a small multiple of
``block_bytes``, independent of the cache's size.

Not distributed (cheap next to the sums, or O(n²)): preparing the records, the path
decisions, the bounds, the Nyström factor and its sampled check, the self-pair terms, A,
D, MDS and the bandwidth CV — they run in the client process, which therefore holds the
response features (N × p) but never an M × M matrix or the Y and T blocks.

``dask`` and ``distributed`` are imported only when this engine is used.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pkps_core.space import kernels
from pkps_core.space.affinity import (
    SPARSE_MAX_DENSITY,
    SPARSE_THRESHOLD,
    SPARSE_TOL,
    AffinityEngine,
    SumsReport,
)

SCHEDULER_ENV = "PKPS_DASK_SCHEDULER"
CONNECT_TIMEOUT = "10s"
SPARSE_SLAB_DENSITY = 0.1  # truncated kernel slabs this sparse are multiplied as CSC
MIN_QUERY_SPAN = 64
PROGRESS_SECONDS = 0.5  # a model block is small enough for this many queries of its transfer

# The CLI's progress callback (done, total, label) for the tasks of the current fit; a
# context variable, so it belongs to the caller's context and not to the process.
_PROGRESS: contextvars.ContextVar[Callable[[int, int, str], None] | None] = contextvars.ContextVar(
    "pkps_dask_progress", default=None
)


@contextlib.contextmanager
def reporting_progress(callback: Callable[[int, int, str], None]) -> Iterator[None]:
    """Call ``callback(done, total, label)`` as the distributed tasks of fits finish."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def import_distributed():
    """The ``distributed`` module, or a ValueError saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise ValueError(
            "engine='dask' needs dask and distributed; install them with "
            "pip install 'dask[distributed]>=2026.1,<2027', or use engine='local'"
        ) from None
    return distributed


def connect(address: str):
    """A client of the scheduler at ``address``; a one-line ValueError if unreachable."""
    distributed = import_distributed()
    try:
        return distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:160]
        raise ValueError(
            f"cannot reach the Dask scheduler at {address!r} ({detail}); start one "
            f"(`dask scheduler` and `dask worker {address}`) or fix --scheduler / "
            f"{SCHEDULER_ENV}"
        ) from None


def resolve_client(client):
    """``(client, owned)``: a Client as given, or one for an address (``client``, else
    ``$PKPS_DASK_SCHEDULER``), reusing the default client when it is on that scheduler;
    ``owned`` is True when the caller must close it."""
    distributed = import_distributed()
    if client is not None and not isinstance(client, str):
        return client, False
    address = client or os.environ.get(SCHEDULER_ENV)
    try:
        current = distributed.get_client()
    except ValueError:
        current = None
    if address is None:
        if current is None:
            raise ValueError(
                "engine='dask' needs a cluster: pass client= (a distributed.Client or a "
                f"scheduler address such as tcp://host:8786) or set {SCHEDULER_ENV}"
            )
        return current, False
    if current is not None and current.scheduler is not None:
        if current.scheduler.address == address:
            return current, False
    return connect(address), True


@dataclass(frozen=True)
class ModelBlock:
    """The responses of consecutive models [start, stop), as one scattered piece.

    ``features`` carries a last column of ones (its transfer is the kernel mass, the
    denominator); ``queries`` are the unique queries the block answered and
    ``local_query`` each response's position among them.
    """

    start: int
    stop: int
    bounds: np.ndarray
    features: np.ndarray
    query: np.ndarray
    queries: np.ndarray
    local_query: np.ndarray

    @property
    def n_models(self) -> int:
        return self.stop - self.start


def model_blocks(layout, features: np.ndarray, block_bytes: int) -> list[ModelBlock]:
    """Consecutive model ranges whose responses (and transfer) fit ``block_bytes``."""
    width = features.shape[1] + 1
    counts = layout.responses_per_model
    blocks, start = [], 0
    max_models = max(1, block_bytes // (8 * width * MIN_QUERY_SPAN))
    max_rows = max(1, block_bytes // (8 * width))
    while start < layout.n_models:
        stop, rows = start + 1, int(counts[start])
        while stop < layout.n_models and stop - start < max_models:
            if rows + counts[stop] > max_rows:
                break
            rows += int(counts[stop])
            stop += 1
        lo, hi = layout.model_bounds[start], layout.model_bounds[stop]
        query = layout.query_idx[lo:hi]
        queries, local_query = np.unique(query, return_inverse=True)
        augmented = np.empty((hi - lo, width))
        augmented[:, :-1] = features[lo:hi]
        augmented[:, -1] = 1.0
        blocks.append(
            ModelBlock(
                start,
                stop,
                layout.model_bounds[start : stop + 1] - lo,
                augmented,
                query,
                queries,
                local_query.ravel(),
            )
        )
        start = stop
    return blocks


def kernel_slab(query_vectors, rows: np.ndarray, cols: np.ndarray, bandwidth, cutoff):
    """``K_Q[rows, cols]``: RBF from the query vectors (entries with squared distance above
    ``cutoff`` dropped, when given), or the delta indicator for bandwidth 0."""
    if bandwidth <= 0:
        return (rows[:, None] == cols[None, :]).astype(float)
    sq = kernels.squared_distances(query_vectors[rows], query_vectors[cols])
    sq[rows[:, None] == cols[None, :]] = 0.0  # as the local engine's zeroed diagonal
    slab = kernels.rbf_from_squared(sq, bandwidth, out=sq if cutoff is None else None)
    if cutoff is not None:
        slab[sq > cutoff] = 0.0
    return slab


def factorized_tile(row_block, col_block, query_vectors, q_lo, q_hi, bandwidth, cutoff):
    """Partial N and Z of models A × B over the row queries [q_lo, q_hi) (linear kernel).

    ``T_i'[q] = Σ_l K_Q[q, q_l] x_i'l`` for B's models over the query block (one gather
    product per model, as the local gather path), contracted with Y of A's responses to
    those queries.
    """
    width = row_block.features.shape[1]
    n_rows, n_cols = row_block.n_models, col_block.n_models
    numerator, denominator = np.zeros((n_rows, n_cols)), np.zeros((n_rows, n_cols))
    inside = (row_block.query >= q_lo) & (row_block.query < q_hi)
    if not inside.any():
        return numerator, denominator
    span = q_hi - q_lo
    if bandwidth <= 0:  # delta kernel: T = Y of B's models over the query block
        transfer = _scatter_rows(col_block, q_lo, q_hi)
    else:
        rows = np.arange(q_lo, q_hi)
        slab = kernel_slab(query_vectors, rows, col_block.queries, bandwidth, cutoff)
        if cutoff is not None and np.count_nonzero(slab) <= SPARSE_SLAB_DENSITY * slab.size:
            if not slab.any():
                return numerator, denominator
            slab = sp.csc_array(slab)  # the sparse path: work in proportion to kept entries
        transfer = np.empty((n_cols, span, width))
        for j in range(n_cols):
            lo, hi = col_block.bounds[j], col_block.bounds[j + 1]
            transfer[j] = slab[:, col_block.local_query[lo:hi]] @ col_block.features[lo:hi]
    y = _scatter_rows(row_block, q_lo, q_hi)
    numerator = y[:, :, :-1].reshape(n_rows, -1) @ transfer[:, :, :-1].reshape(n_cols, -1).T
    denominator = y[:, :, -1] @ transfer[:, :, -1].T
    return numerator, denominator


def _scatter_rows(block, q_lo: int, q_hi: int) -> np.ndarray:
    """Y of the block's models over the queries [q_lo, q_hi): (models, span, width)."""
    y = np.zeros((block.n_models, q_hi - q_lo, block.features.shape[1]))
    inside = (block.query >= q_lo) & (block.query < q_hi)
    owner = np.repeat(np.arange(block.n_models), np.diff(block.bounds))
    y[owner[inside], block.query[inside] - q_lo] = block.features[inside]
    return y


def pairwise_tile(row_block, col_block, query_vectors, bandwidth, response_bandwidth, rows):
    """N and Z of models A × B with the RBF response kernel, over all their response pairs
    (``rows`` response rows of A at a time)."""
    x_cols = col_block.features[:, :-1]
    sq_cols = np.einsum("ij,ij->i", x_cols, x_cols)
    n_rows, n_cols = row_block.n_models, col_block.n_models
    numerator, denominator = np.zeros((n_rows, n_cols)), np.zeros((n_rows, n_cols))
    owner = np.repeat(np.arange(n_rows), np.diff(row_block.bounds))
    col_starts = col_block.bounds[:-1]
    scale = -1.0 / (2.0 * response_bandwidth * response_bandwidth)
    for lo in range(0, len(row_block.query), rows):
        hi = min(len(row_block.query), lo + rows)
        kq = kernel_slab(query_vectors, row_block.query[lo:hi], col_block.query, bandwidth, None)
        x = row_block.features[lo:hi, :-1]
        sq = np.einsum("ij,ij->i", x, x)[:, None] + sq_cols[None, :] - 2.0 * (x @ x_cols.T)
        np.maximum(sq, 0.0, out=sq)
        kr = np.exp(sq * scale)
        np.add.at(numerator, owner[lo:hi], np.add.reduceat(kq * kr, col_starts, axis=1))
        np.add.at(denominator, owner[lo:hi], np.add.reduceat(kq, col_starts, axis=1))
    return numerator, denominator


def count_within(query_vectors, q_lo, q_hi, cutoff) -> int:
    """Entries of rows [q_lo, q_hi) of the squared query distances at most ``cutoff``."""
    rows = np.arange(q_lo, q_hi)
    sq = kernels.squared_distances(query_vectors[rows], query_vectors)
    sq[np.arange(len(rows)), rows] = 0.0
    return int(np.count_nonzero(sq <= cutoff))


def project(block, factor, start: int, stop: int):
    """``Φ[Q_i]^T [X_i, 1]`` of the block's models [start, stop) (local indices)."""
    rank, width = factor.shape[1], block.features.shape[1]
    projected = np.empty((stop - start, rank, width))
    for j in range(start, stop):
        lo, hi = block.bounds[j], block.bounds[j + 1]
        np.matmul(factor[block.query[lo:hi]].T, block.features[lo:hi], out=projected[j - start])
    return (
        np.ascontiguousarray(projected[:, :, :-1]).reshape(stop - start, -1),
        np.ascontiguousarray(projected[:, :, -1]),
    )


def inner_tile(left, right):
    return left[0] @ right[0].T, left[1] @ right[1].T


def add_sums(left, right):
    return left[0] + right[0], left[1] + right[1]


class DaskAffinityEngine(AffinityEngine):
    """:class:`AffinityEngine` whose kernel sums run as tasks on a Dask cluster.

    Parameters
    ----------
    *args, **kwargs
        As for :class:`AffinityEngine`.
    client : distributed.Client, str or None
        The cluster: a client, a scheduler address, or None for ``$PKPS_DASK_SCHEDULER``
        (else the current default client).

    Attributes
    ----------
    task_counts : dict
        Tasks submitted by kind (``tile``, ``reduce``, ``project``, ``count``).
    bytes_scattered, bytes_gathered : int
        Bytes sent to the workers and results brought back.
    """

    def __init__(self, *args, client=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.client, self._owns_client = resolve_client(client)
        self._blocks = None
        self._block_futures = None
        self._queries_future = None
        self.task_counts = {"tile": 0, "reduce": 0, "project": 0, "count": 0}
        self.bytes_scattered = 0
        self.bytes_gathered = 0

    def close(self) -> None:
        super().close()
        if self._owns_client:
            self.client.close()
            self._owns_client = False

    def _scatter(self):
        if self._block_futures is None:
            self._blocks = model_blocks(self.layout, self.features, self.block_bytes)
            self._block_futures = self.client.scatter(self._blocks, hash=False)
            vectors = self.query_vectors
            self._queries_future = (
                None
                if vectors is None
                else self.client.scatter(vectors, broadcast=True, hash=False)
            )
            self.bytes_scattered += sum(b.features.nbytes for b in self._blocks)
            self.bytes_scattered += 0 if vectors is None else vectors.nbytes
        return self._blocks, self._block_futures, self._queries_future

    def _query_span(self) -> int:
        blocks, _, _ = self._scatter()
        widest = max(b.n_models for b in blocks) * self._blocks[0].features.shape[1]
        n_q = self.layout.n_queries
        return int(max(1, min(n_q, self.block_bytes // (8 * max(n_q, widest)))))

    def _collect(self, futures: list, label: str) -> list:
        """Results of ``futures`` in order, reporting progress when a callback is set."""
        callback = _PROGRESS.get()
        if callback is not None:
            done = -1
            while done < len(futures):
                now = sum(future.done() for future in futures)
                if now == done:
                    time.sleep(PROGRESS_SECONDS)  # (distributed.wait needs a default client)
                    continue
                done = now
                callback(done, len(futures), label)
        results = self.client.gather(futures)
        self.bytes_gathered += sum(a.nbytes + b.nbytes for a, b in results)
        return results

    def _tree_sum(self, futures: list):
        while len(futures) > 1:
            paired = [futures[k : k + 2] for k in range(0, len(futures), 2)]
            futures = [self.client.submit(add_sums, *p) if len(p) == 2 else p[0] for p in paired]
            self.task_counts["reduce"] += sum(len(p) == 2 for p in paired)
        return futures[0]

    def _assemble(self, blocks, tiles) -> tuple[np.ndarray, np.ndarray]:
        n = self.layout.n_models
        numerator, denominator = np.zeros((n, n)), np.zeros((n, n))
        for (a, b), (tile_num, tile_den) in tiles:
            rows = slice(blocks[a].start, blocks[a].stop)
            cols = slice(blocks[b].start, blocks[b].stop)
            numerator[rows, cols], denominator[rows, cols] = tile_num, tile_den
            numerator[cols, rows], denominator[cols, rows] = tile_num.T, tile_den.T
        return numerator, denominator

    def _distributed_sums(self, bandwidth: float, cutoff=None):
        """N and Z of Eq. (1) on the cluster (``cutoff``: the sparse path's truncation)."""
        blocks, futures, queries = self._scatter()
        pairs = [(a, b) for a in range(len(blocks)) for b in range(a, len(blocks))]
        reduced = []
        if self.response_kernel == "linear":
            span = self._query_span()
            edges = range(0, self.layout.n_queries, span)
            for a, b in pairs:
                parts = [
                    self.client.submit(
                        factorized_tile,
                        futures[a],
                        futures[b],
                        queries,
                        lo,
                        min(self.layout.n_queries, lo + span),
                        bandwidth,
                        cutoff,
                    )
                    for lo in edges
                ]
                self.task_counts["tile"] += len(parts)
                reduced.append(self._tree_sum(parts))
        else:
            widest = max(len(b.query) for b in blocks)
            rows = int(max(1, self.block_bytes // (4 * 8 * widest)))
            for a, b in pairs:
                reduced.append(
                    self.client.submit(
                        pairwise_tile,
                        futures[a],
                        futures[b],
                        queries,
                        bandwidth,
                        self.response_bandwidth,
                        rows,
                    )
                )
                self.task_counts["tile"] += 1
        label = "exact" if cutoff is None else "sparse"
        tiles = self._collect(reduced, f"sums at bandwidth {bandwidth:.4g} ({label})")
        return self._assemble(blocks, list(zip(pairs, tiles, strict=True)))

    def _exact(self, bandwidth: float) -> kernels.KernelSums:
        return self._wrap(*self._distributed_sums(bandwidth))

    def _sparse(self, bandwidth, self_pairs):
        """The local engine's sparse path: the density test and the truncated sums run
        on the cluster, the bound here."""
        cutoff = 2.0 * bandwidth * bandwidth * np.log(1.0 / SPARSE_THRESHOLD)
        n_q = self.layout.n_queries
        _, _, queries = self._scatter()
        span = self._query_span()
        counts = [
            self.client.submit(count_within, queries, lo, min(n_q, lo + span), cutoff)
            for lo in range(0, n_q, span)
        ]
        self.task_counts["count"] += len(counts)
        kept = sum(self.client.gather(counts))
        if self.method == "auto" and kept > SPARSE_MAX_DENSITY * n_q * n_q:
            return None
        result = self._wrap(*self._distributed_sums(bandwidth, cutoff))
        bound = self.truncation_bound(result, SPARSE_THRESHOLD, self_pairs)
        if bound > SPARSE_TOL:
            return None
        self.reports.append(SumsReport(bandwidth, "sparse", bound, None, "bound"))
        return result

    def _rank_sums(self, factor: np.ndarray):
        """Nyström sums: projections per model block and inner products per block pair
        on the cluster; the exact diagonal restored here (as the local path)."""
        blocks, futures, _ = self._scatter()
        factor_future = self.client.scatter(factor, broadcast=True, hash=False)
        self.bytes_scattered += factor.nbytes
        width = blocks[0].features.shape[1]
        per_model = 8 * factor.shape[1] * width
        pieces, projections = [], []
        for index, block in enumerate(blocks):
            step = int(max(1, self.block_bytes // per_model))
            for lo in range(0, block.n_models, step):
                hi = min(block.n_models, lo + step)
                pieces.append((block.start + lo, block.start + hi))
                projections.append(
                    self.client.submit(project, futures[index], factor_future, lo, hi)
                )
        self.task_counts["project"] += len(projections)
        pairs = [(a, b) for a in range(len(pieces)) for b in range(a, len(pieces))]
        tiles = [self.client.submit(inner_tile, projections[a], projections[b]) for a, b in pairs]
        self.task_counts["tile"] += len(tiles)
        results = self._collect(tiles, f"Nyström sums (rank {factor.shape[1]})")
        spans = [_Span(lo, hi) for lo, hi in pieces]
        numerator, denominator = self._assemble(spans, list(zip(pairs, results, strict=True)))
        layout = self.layout
        x = self.features
        correction = (1.0 - np.einsum("ij,ij->i", factor, factor))[layout.query_idx]
        diag = np.arange(layout.n_models)
        sq_norms = np.einsum("ij,ij->i", x, x)
        numerator[diag, diag] += np.bincount(
            layout.model_idx, correction * sq_norms, minlength=layout.n_models
        )
        denominator[diag, diag] += np.bincount(
            layout.model_idx, correction, minlength=layout.n_models
        )
        return numerator, denominator


@dataclass(frozen=True)
class _Span:
    start: int
    stop: int
