"""The kernel sums of Eq. (1) as Dask tasks, for caches that outgrow one machine.

:class:`DaskBackend` is the :class:`~pkps_core.space.affinity.AffinityEngine`'s backend on a
``distributed`` cluster: the engine decides paths, bounds and reports as with the local
backend, and the tasks here run the engine's primitives with the array functions the local
backend runs (:func:`~pkps_core.space.sums.transfer_models`, ``scatter_y``, ``pairwise_rows``,
``project_models``; :func:`~pkps_core.space.kernels.rbf_from_squared`), so both give one D.

The responses, with a last feature of ones (its transfer is the kernel mass, Z), are
scattered once, twice over: in *column blocks* of consecutive models (:class:`ColumnBlock`)
and in *query pieces* (:class:`QueryPiece`: every response to a range of queries), with the
query vectors broadcast. One set of tasks serves all the query kernels of a round (the
exact sums of a whole bandwidth grid come in one round): a task takes a column block and a
run of query pieces and, per stretch s of those queries that fits ``block_bytes``, builds
once what no bandwidth changes — the squared distances between the block's queries and s,
and Y over s of every model up to the block's last (the upper triangle) — then per kernel
the slab K_Q[Q_c, s] (truncated and sparse for the sparse path, the indicator for delta),
the transfer of the block's models and its contraction with Y. The runs of a block are
added in a tree on the cluster. The RBF response kernel: a task per pair of blocks and run
of rows, its response kernel computed once for all query kernels. Nyström factors:
projections per run of models (one run or more per worker thread), inner products per pair
of runs. The sparse path's density test counts near query pairs in the client, by rows.

A pass has :data:`TASKS_PER_THREAD` tasks per worker thread, none of less than
:data:`MIN_TASK_FLOPS` (a tenth of a second of a core): the scheduler costs a millisecond a
task, and a larger one reuses its distances and Y (``bench/distributed.py`` measures the
task stream). A task's memory is a small multiple of ``block_bytes``. The client holds the
features, never an M × M matrix, Y or T. ``dask`` is imported only for this backend.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.dask_inputs import SCHEDULER_ENV, connect, resolve_client
from pkps_core.space.runtime import borrow_buffer
from pkps_core.space.sums import pairwise_rows, project_models, scatter_y, transfer_models

# the names the command line takes from here, the cluster's address and connection with them
__all__ = ["SCHEDULER_ENV", "DaskBackend", "connect", "dask_backend", "reporting_progress"]
SPARSE_SLAB_DENSITY = 0.1  # truncated kernel slabs this sparse are multiplied as CSR
MIN_QUERY_SPAN = 64  # queries of a query piece, at least
TASKS_PER_THREAD = 2  # tasks of a pass per worker thread (for balance), at most ...
MIN_TASK_FLOPS = 2e9  # ... while each keeps at least this much work (~0.15 s of one core)
PROGRESS_SECONDS = 0.5

# The CLI's progress callback (done, total, label) for the current fit's tasks (per context)
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


def dask_backend(client=None) -> Callable:
    """The ``backend`` argument of :class:`~pkps_core.space.affinity.AffinityEngine` for
    a cluster: a client, a scheduler address, or None for ``$PKPS_DASK_SCHEDULER`` (else
    the current default client)."""
    return functools.partial(DaskBackend, client=client)


@dataclass(frozen=True)
class ColumnBlock:
    """The responses of consecutive models [start, stop), as one scattered piece.

    ``features_t`` holds the features feature-major (the gather's operand), with a last
    row of ones; ``queries`` are the unique queries the block answered, ``local_query``
    each response's position among them, ``bounds`` the models' responses.
    """

    start: int
    stop: int
    bounds: np.ndarray
    features_t: np.ndarray
    query: np.ndarray
    queries: np.ndarray
    local_query: np.ndarray

    n_models = property(lambda self: self.stop - self.start)
    features = property(lambda self: self.features_t.T, doc="The features, response-major.")
    nbytes = property(lambda self: self.features_t.nbytes)


@dataclass(frozen=True)
class QueryPiece:
    """Every response to the unique queries [q_lo, q_hi), in model order: its model
    (``owner``), query and features (ending in a column of ones)."""

    q_lo: int
    q_hi: int
    owner: np.ndarray
    query: np.ndarray
    features: np.ndarray
    nbytes = property(lambda self: self.features.nbytes)


def column_blocks(layout, augmented: np.ndarray, block_bytes: int) -> list[ColumnBlock]:
    """Consecutive model ranges whose responses (and transfer) fit ``block_bytes``."""
    width, bounds = augmented.shape[1], layout.model_bounds
    max_models = max(1, block_bytes // (8 * width * MIN_QUERY_SPAN))
    max_rows = max(1, block_bytes // (8 * width))
    blocks, start = [], 0
    while start < layout.n_models:
        fits = np.searchsorted(bounds, bounds[start] + max_rows, side="right") - 1
        stop = int(np.clip(fits, start + 1, min(layout.n_models, start + max_models)))
        lo, hi = bounds[start], bounds[stop]
        queries, local_query = np.unique(layout.query_idx[lo:hi], return_inverse=True)
        features_t = np.ascontiguousarray(augmented[lo:hi].T)
        answers = layout.query_idx[lo:hi], queries, local_query.ravel()
        blocks.append(ColumnBlock(start, stop, bounds[start : stop + 1] - lo, features_t, *answers))
        start = stop
    return blocks


def query_pieces(layout, augmented: np.ndarray, edges: np.ndarray) -> list[QueryPiece]:
    """The responses split by the query ranges between ``edges``."""
    piece = np.searchsorted(edges, layout.query_idx, side="right") - 1
    order = np.argsort(piece, kind="stable")  # model order kept within a piece
    bounds = np.searchsorted(piece[order], np.arange(len(edges)))
    return [
        QueryPiece(
            int(edges[k]),
            int(edges[k + 1]),
            layout.model_idx[order[bounds[k] : bounds[k + 1]]],
            layout.query_idx[order[bounds[k] : bounds[k + 1]]],
            augmented[order[bounds[k] : bounds[k + 1]]],
        )
        for k in range(len(edges) - 1)
    ]


def query_distances(query_vectors, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Squared distances between the unique queries ``rows`` and ``cols`` (both sorted),
    0 between a query and itself (as the local backend's zeroed diagonal)."""
    sq = kernels.squared_distances(query_vectors[rows], query_vectors[cols])
    _, at_row, at_col = np.intersect1d(rows, cols, assume_unique=True, return_indices=True)
    sq[at_row, at_col] = 0.0
    return sq


def kernel_tile(column, first, last, pieces, *, query_vectors, query_kernels, block_bytes):
    """Partial N and Z of the models up to the column block's model ``last`` (rows) ×
    its models [first, last) (columns) over the queries of ``pieces`` (consecutive), for
    each query kernel: arrays of shape (kernels, rows, last − first)."""
    lo_r, hi_r = column.bounds[first], column.bounds[last]
    bounds = column.bounds[first : last + 1] - lo_r
    features_t = column.features_t[:, lo_r:hi_r]
    features, query = features_t.T, column.query[lo_r:hi_r]
    queries, local_query = np.unique(query, return_inverse=True)
    local_query = local_query.ravel()
    width, k, n_rows = features_t.shape[0], last - first, column.start + last
    numerator = np.zeros((len(query_kernels), n_rows, k))
    denominator = np.zeros_like(numerator)
    row_owner, row_query, row_features = (
        np.concatenate([getattr(piece, name) for piece in pieces])
        for name in ("owner", "query", "features")
    )
    rows = row_owner < n_rows  # the upper triangle
    row_owner, row_query, row_features = row_owner[rows], row_query[rows], row_features[rows]
    owner = np.repeat(np.arange(k), np.diff(bounds))
    q_lo, q_hi = pieces[0].q_lo, pieces[-1].q_hi
    per_query = 8 * ((n_rows + 2 * k) * width + 2 * len(queries))  # Y, T, distances, kernel
    stretches = _even_edges(q_lo, q_hi, -(-(q_hi - q_lo) * per_query // block_bytes))
    most = max(hi - lo for lo, hi in stretches)
    sizes = np.array([n_rows, k, k]) * width * most
    # one buffer for all (fresh memory costs page faults, on every allocation where the
    # workers' malloc returns freed memory at once, as Dask's nannies set it)
    with borrow_buffer(int(sizes.sum() + len(queries) * most)) as buffer:
        y_buffer, transfer_buffer, delta_buffer, kernel_buffer = np.split(buffer, np.cumsum(sizes))
        for lo, hi in stretches:
            y = scatter_y(row_features, row_owner, row_query, n_rows, lo, hi, y_buffer)
            transfer = transfer_buffer[: k * width * (hi - lo)].reshape(k, width, hi - lo)
            sq = None
            for index, kernel in enumerate(query_kernels):
                into = (numerator[index], denominator[index])
                if kernel.bandwidth <= 0:  # delta: T = Y of the column models
                    delta = scatter_y(features, owner, query, k, lo, hi, delta_buffer)
                    _contract(y, delta, *into)
                    continue
                if sq is None:  # the distances, the same for every kernel
                    sq = query_distances(query_vectors, queries, np.arange(lo, hi))
                kept = None if kernel.cutoff is None else sq <= kernel.cutoff
                if kept is not None and np.count_nonzero(kept) <= SPARSE_SLAB_DENSITY * sq.size:
                    if not kept.any():  # the sparse path, nothing kept
                        continue
                    slab = kernels.truncated_rbf(sq, kernel.bandwidth, kernel.cutoff)
                else:
                    slab = kernel_buffer[: sq.size].reshape(sq.shape)
                    kernels.rbf_from_squared(sq, kernel.bandwidth, out=slab)
                    if kept is not None:  # the sparse path: entries below ε dropped
                        slab[~kept] = 0.0
                transfer_models(
                    slab, features, local_query, bounds, transfer, features_t=lambda: features_t
                )
                _contract(y, transfer, *into)
    return numerator, denominator


def _even_edges(lo: int, hi: int, parts: int):
    """``parts`` (at least one, at most hi − lo) consecutive ranges of near-equal size."""
    edges = np.linspace(lo, hi, int(np.clip(parts, 1, max(1, hi - lo))) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _contract(y, transfer, numerator, denominator) -> None:
    """Add ``<Y_r, T_j>`` of every row r and column j to N, and of the ones feature to Z
    (the rows run up to the columns' last model: the upper triangle, by blocks)."""
    p, rows = transfer.shape[1] - 1, y.shape[0]
    numerator += y[:, :p].reshape(rows, -1) @ transfer[:, :p].reshape(len(transfer), -1).T
    denominator += y[:, p] @ transfer[:, p].T


def pairwise_tile(row_block, col_block, lo, hi, *, query_vectors, query_kernels, bandwidth, rows):
    """N and Z of the row block's responses [lo, hi) × the column block with the RBF
    response kernel over every response pair (:func:`~pkps_core.space.sums.pairwise_rows`),
    for each query kernel: (kernels, row models, column models)."""
    query = row_block.query[lo:hi]

    def blocks(chunk):
        sq, found = None, []
        for kernel in query_kernels:
            if kernel.bandwidth <= 0:
                found.append((query[chunk, None] == col_block.query[None, :]).astype(float))
                continue
            if sq is None:  # between the queries of the pairs, once for all kernels
                queries, local = np.unique(query[chunk], return_inverse=True)
                sq = query_distances(query_vectors, queries, col_block.queries)
                sq = sq[local.ravel()][:, col_block.local_query]
            found.append(kernels.rbf_from_squared(sq, kernel.bandwidth))
        return found

    owner = np.repeat(np.arange(row_block.n_models), np.diff(row_block.bounds))[lo:hi]
    numerator, denominator = pairwise_rows(
        row_block.features[lo:hi, :-1],
        owner,
        col_block.features[:, :-1],
        col_block.bounds[:-1],
        blocks,
        "rbf",
        bandwidth,
        rows,
    )
    shape = (len(query_kernels), row_block.n_models, col_block.n_models)
    full = np.zeros((2, *shape))
    full[:, :, : numerator.shape[1]] = numerator, denominator
    return full[0], full[1]


def project(block, factor, lo: int, hi: int):
    """``Φ[Q_i]^T [X_i, 1]`` of the block's models [lo, hi) (local indices), split into
    the features' part (models, rank·p) and the ones' (models, rank)."""
    rows = slice(block.bounds[lo], block.bounds[hi])
    bounds = block.bounds[lo : hi + 1] - block.bounds[lo]
    projected = project_models(factor, block.features[rows], block.query[rows], bounds)
    flat = np.ascontiguousarray(projected[:, :, :-1]).reshape(hi - lo, -1)
    return flat, np.ascontiguousarray(projected[:, :, -1])


def inner_tile(left, right):
    """N and Z of two runs of models from their projections: (1, rows, columns) each."""
    return (left[0] @ right[0].T)[None], (left[1] @ right[1].T)[None]


def add_sums(left, right):
    return left[0] + right[0], left[1] + right[1]


class DaskBackend:
    """The engine's primitives as tasks on the cluster of ``client`` (a client, an address
    or None: :func:`~pkps_core.space.dask_inputs.resolve_client`; one it connected is
    closed by :meth:`close`). ``task_counts``: tasks by kind (``tile``, ``reduce``,
    ``project``); ``bytes_moved``: bytes ``scattered`` and ``gathered``."""

    def __init__(self, engine, client=None, *, source: DaskBackend | None = None):
        self.layout, self.features = engine.layout, engine.features
        self.query_vectors, self.block_bytes = engine.query_vectors, engine.block_bytes
        self.response_kernel = engine.response_kernel
        self.response_bandwidth = engine.response_bandwidth
        if source is None:
            self.client, self._owns_client = resolve_client(client)
            self.task_counts, self.bytes_moved = Counter(), Counter()
        else:  # another engine's backend: same cluster and counters
            self.client, self._owns_client = source.client, False
            self.task_counts, self.bytes_moved = source.task_counts, source.bytes_moved
        self._source = source

    def sharing(self, engine) -> DaskBackend:
        """A backend over ``engine``'s features on the same cluster."""
        return DaskBackend(engine, source=self)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()
            self._owns_client = False

    @functools.cached_property
    def threads(self) -> int:
        """Worker threads of the cluster (asked once)."""
        return max(1, sum(self.client.nthreads().values()))

    def _tasks(self, flops: float) -> int:
        """How many tasks a pass of ``flops`` is split into (module docstring)."""
        return int(max(1, min(TASKS_PER_THREAD * self.threads, flops // MIN_TASK_FLOPS)))

    def _scatter(self, data, broadcast: bool = False):
        futures = self.client.scatter(data, hash=False, broadcast=broadcast)
        items = data if isinstance(data, list) else [data]
        self.bytes_moved["scattered"] += sum(_nbytes(item) for item in items)
        return futures

    def _augmented(self) -> np.ndarray:
        return np.hstack([self.features, np.ones((self.layout.n_responses, 1))])

    @functools.cached_property
    def _columns(self):
        """The column blocks and their futures, scattered on first use."""
        blocks = column_blocks(self.layout, self._augmented(), self.block_bytes)
        return blocks, self._scatter(blocks)

    @functools.cached_property
    def _pieces(self):
        """The query pieces and their futures: as many as a pass has tasks, or more where
        a block of them would not hold all the responses to their queries."""
        augmented, n_q = self._augmented(), self.layout.n_queries
        count = max(TASKS_PER_THREAD * self.threads, 2 * -(-augmented.nbytes // self.block_bytes))
        edges = [lo for lo, _ in _even_edges(0, n_q, min(count, n_q // MIN_QUERY_SPAN))]
        pieces = query_pieces(self.layout, augmented, np.array([*edges, n_q]))
        return pieces, self._scatter(pieces)

    @functools.cached_property
    def _queries(self):
        """The query vectors' future (another engine's, where they are the same)."""
        if self._source is not None and self._source.query_vectors is self.query_vectors:
            return self._source._queries
        return None if self.query_vectors is None else self._scatter(self.query_vectors, True)

    def count_within(self, cutoffs: list[float]) -> list[int]:
        """Counted here, a block of query rows at a time (M² q flops; no M × M held)."""
        if not cutoffs:
            return []
        n_q, counts = self.layout.n_queries, np.zeros(len(cutoffs), dtype=int)
        for lo, hi in _even_edges(0, n_q, -(-16 * n_q * n_q // self.block_bytes)):
            sq = query_distances(self.query_vectors, np.arange(lo, hi), np.arange(n_q))
            counts += [np.count_nonzero(sq <= cutoff) for cutoff in cutoffs]
        return counts.tolist()

    def sums(self, query_kernels: list, factors: list[np.ndarray]):
        """N and Z (not symmetrised) of each query kernel and of each factor's ``Φ Φ^T``,
        from one set of tasks."""
        passes = [self._rank_pass(factor) for factor in factors]
        if query_kernels:
            kernel_pass = self._pair_pass if self.response_kernel == "rbf" else self._kernel_pass
            passes.insert(0, kernel_pass(query_kernels))
        futures = [future for _, tiles in passes for future in tiles]
        label = f"sums of {len(query_kernels)} query kernel(s), {len(factors)} Nyström factor(s)"
        results, sums = iter(self._collect(futures, label)), []
        for places, tiles in passes:
            sums.append(self._assemble(places, [next(results) for _ in tiles]))
        return (sums.pop(0) if query_kernels else []), [rank[0] for rank in sums]

    def _assemble(self, places, results) -> list[tuple[np.ndarray, np.ndarray]]:
        """N and Z per kernel from tiles of (kernels, rows, columns) at ``places`` (row
        and column slices) that cover the upper triangle; the lower is its mirror."""
        n, depth = self.layout.n_models, len(results[0][0])
        numerator, denominator = np.zeros((depth, n, n)), np.zeros((depth, n, n))
        for (rows, cols), (num, den) in zip(places, results, strict=True):
            numerator[:, rows, cols], denominator[:, rows, cols] = num, den
        lower = np.tril_indices(n, -1)
        for num, den in zip(numerator, denominator, strict=True):
            num[lower], den[lower] = num.T[lower], den.T[lower]
        return list(zip(numerator, denominator, strict=True))

    def _kernel_pass(self, query_kernels):
        """The tasks of the factorised sums of every kernel (module docstring): per
        column block, runs of query pieces — enough for the block's share of the pass and
        for the rows a task reads to fit a block; each task computes its own kernel slabs
        and Y, none twice — and runs of its models only where the pieces run out."""
        blocks, block_futures = self._columns
        pieces, piece_futures = self._pieces
        n_q, width = self.layout.n_queries, self.features.shape[1] + 1
        dim = 0 if self.query_vectors is None else self.query_vectors.shape[1]
        rbf = sum(k.bandwidth > 0 for k in query_kernels)
        work = [
            2.0 * n_q * len(b.queries) * (dim + 10 * rbf)  # distances, kernel values
            + 2.0 * n_q * len(b.query) * width * rbf  # transfers
            + 2.0 * n_q * width * b.n_models * (b.start + b.n_models / 2) * len(query_kernels)
            for b in blocks
        ]
        tasks, total = self._tasks(sum(work)), sum(work)
        common = {"query_vectors": self._queries, "query_kernels": query_kernels}
        common["block_bytes"] = self.block_bytes
        places, tiles = [], []
        for index, (block, block_work) in enumerate(zip(blocks, work, strict=True)):
            share = max(1, round(tasks * block_work / total))
            row_bytes = 8 * width * self.layout.model_bounds[block.stop]
            query_runs = int(np.clip(max(share, -(-row_bytes // self.block_bytes)), 1, len(pieces)))
            for first, last in _even_edges(0, block.n_models, -(-share // query_runs)):
                parts = [
                    self._submit(kernel_tile, block_futures[index], first, last, runs, **common)
                    for runs in (
                        piece_futures[a:b] for a, b in _even_edges(0, len(pieces), query_runs)
                    )
                ]
                tiles.append(self._tree_sum(parts))
                places.append(
                    (slice(0, block.start + last), slice(block.start + first, block.start + last))
                )
        return places, tiles

    def _pair_pass(self, query_kernels):
        """The tasks of the pairwise sums (RBF response kernel): per pair of column
        blocks, runs of the first one's rows."""
        blocks, futures = self._columns
        pairs = [(a, b) for a in range(len(blocks)) for b in range(a, len(blocks))]
        width = self.features.shape[1] + 10 * len(query_kernels)
        work = [2.0 * len(blocks[a].query) * len(blocks[b].query) * width for a, b in pairs]
        tasks, total = self._tasks(sum(work)), sum(work)
        rows = int(max(1, self.block_bytes // (6 * 8 * max(len(b.query) for b in blocks))))
        common = {"query_vectors": self._queries, "query_kernels": query_kernels}
        common.update(bandwidth=self.response_bandwidth, rows=rows)
        places, tiles = [], []
        for (a, b), pair_work in zip(pairs, work, strict=True):
            runs = round(tasks * pair_work / total)
            parts = [
                self._submit(pairwise_tile, futures[a], futures[b], lo, hi, **common)
                for lo, hi in _even_edges(
                    0, len(blocks[a].query), min(runs, len(blocks[a].query) // 64)
                )
            ]
            tiles.append(self._tree_sum(parts))
            places.append(
                (slice(blocks[a].start, blocks[a].stop), slice(blocks[b].start, blocks[b].stop))
            )
        return places, tiles

    def _rank_pass(self, factor: np.ndarray):
        """The tasks of one Nyström factor's sums (module docstring)."""
        blocks, futures = self._columns
        factor_future = self._scatter(factor, True)
        step = self.block_bytes // (8 * factor.shape[1] * (self.features.shape[1] + 1))
        step = max(1, min(step, -(-sum(b.n_models for b in blocks) // self.threads)))
        runs, projections = [], []
        for index, block in enumerate(blocks):
            for lo in range(0, block.n_models, step):
                hi = min(block.n_models, lo + step)
                runs.append(slice(block.start + lo, block.start + hi))
                projections.append(
                    self._submit(project, futures[index], factor_future, lo, hi, kind="project")
                )
        pairs = [(a, b) for a in range(len(runs)) for b in range(a, len(runs))]
        tiles = [self._submit(inner_tile, projections[a], projections[b]) for a, b in pairs]
        return [(runs[a], runs[b]) for a, b in pairs], tiles

    def _submit(self, function, *args, kind: str = "tile", **kwargs):
        self.task_counts[kind] += 1
        return self.client.submit(function, *args, **kwargs)

    def _tree_sum(self, futures: list):
        while len(futures) > 1:
            paired = [futures[k : k + 2] for k in range(0, len(futures), 2)]
            futures = [
                self._submit(add_sums, *p, kind="reduce") if len(p) == 2 else p[0] for p in paired
            ]
        return futures[0]

    def _collect(self, futures: list, label: str) -> list:
        """Results of ``futures`` in order, reporting progress when a callback is set."""
        callback = _PROGRESS.get()
        while callback is not None:  # (distributed.wait needs a default client)
            done = sum(future.done() for future in futures)
            callback(done, len(futures), label)
            if done == len(futures):
                break
            time.sleep(PROGRESS_SECONDS)
        results = self.client.gather(futures)
        self.bytes_moved["gathered"] += sum(_nbytes(result) for result in results)
        return results


def _nbytes(item) -> int:
    if isinstance(item, (tuple, list)):
        return sum(_nbytes(part) for part in item)
    return int(getattr(item, "nbytes", 8))
