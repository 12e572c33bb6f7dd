"""The kernel sums of Eq. (1) as Dask tasks, for caches that outgrow one machine.

:class:`DaskBackend` is the :class:`~pkps_core.space.affinity.AffinityEngine`'s backend on a
``distributed`` cluster: the engine decides paths, bounds and reports as with the local
backend, and the tasks (:mod:`~pkps_core.space.dask_tasks`) run the engine's primitives
with the array functions the local backend runs, so both give one D.

The responses, with a last feature of ones, are scattered once, twice over: in column
blocks of consecutive models and in query pieces (every response to a range of queries;
none where one block holds every response: tasks then read their rows from it), with the
query vectors broadcast. They go out from a thread of their own as soon as a fit prepares
the engine, while this process chooses the grid, counts and decides. One set of tasks
serves all the query kernels and Nyström factors of a round (a CV grid whose
approximations hold is one round): a task takes a column block and a run of queries,
builds the query distances and Y of those queries once and, per kernel, the slab, the
transfer and the contraction (:func:`~pkps_core.space.dask_tasks.kernel_tile`). The runs
of a block are added in a tree on the cluster. The RBF response kernel: a task per
pair of blocks and run of rows, its response kernel computed once for all query kernels.
Nyström factors: projections per run of models (one run or more per worker thread), inner
products per pair of runs. The sparse path's density test counts near query pairs in the
client, by rows.

A pass has :data:`TASKS_PER_THREAD` tasks per worker thread (the workers then end a pass
within a short task of each other), none of less than :data:`MIN_TASK_FLOPS` (a tenth of
a second of a core): the scheduler costs a millisecond a task, and a larger one reuses its
distances and Y (``bench/distributed.py`` measures the
task stream). A task's memory is a small multiple of ``block_bytes``. The client holds the
features, never an M × M matrix, Y or T. ``dask`` is imported only for this backend.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np

from pkps_core.space import dask_tasks
from pkps_core.space.dask_inputs import SCHEDULER_ENV, connect, resolve_client
from pkps_core.space.dask_tasks import (
    add_sums,
    column_blocks,
    even_edges,
    inner_tile,
    kernel_tile,
    pairwise_tile,
    project,
    query_distances,
    query_pieces,
    warm_up,
)

# the names the command line takes from here, the cluster's address and connection with them
__all__ = ["SCHEDULER_ENV", "DaskBackend", "connect", "dask_backend", "reporting_progress"]
TASKS_PER_THREAD = 3  # tasks of a pass per worker thread (for balance), at most ...
MIN_TASK_FLOPS = 2e9  # ... while each keeps at least this much work (~0.15 s of one core)
PROGRESS_SECONDS = 0.5
_COUNTING = threading.Lock()

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
        self._sender = concurrent.futures.ThreadPoolExecutor(1, "pkps-scatter")
        self._sent: concurrent.futures.Future | None = None
        self._lock, self._query_future = threading.Lock(), None
        self._warming: list = []

    def sharing(self, engine) -> DaskBackend:
        """A backend over ``engine``'s features on the same cluster."""
        return DaskBackend(engine, source=self)

    def close(self) -> None:
        self._sender.shutdown()
        self._warming = []
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
        with _COUNTING:  # (the backends of one cluster share the counter and scatter at once)
            self.bytes_moved["scattered"] += sum(_nbytes(item) for item in items)
        return futures

    @functools.cached_property
    def _augmented(self) -> np.ndarray:
        return np.hstack([self.features, np.ones((self.layout.n_responses, 1))])

    @functools.cached_property
    def _columns(self):
        """The column blocks and their futures, scattered on first use."""
        blocks = column_blocks(self.layout, self._augmented, self.block_bytes)
        return blocks, self._scatter(blocks)

    @functools.cached_property
    def _pieces(self):
        """The query pieces and their futures: as many as a pass has tasks, or more where
        a block of them would not hold all the responses to their queries. None where one
        column block holds every response: its tasks read their rows from it."""
        if len(self._columns[0]) == 1:
            return None
        augmented, n_q = self._augmented, self.layout.n_queries
        count = max(TASKS_PER_THREAD * self.threads, 2 * -(-augmented.nbytes // self.block_bytes))
        edges = [lo for lo, _ in even_edges(0, n_q, min(count, n_q // dask_tasks.MIN_QUERY_SPAN))]
        pieces = query_pieces(self.layout, augmented, np.array([*edges, n_q]))
        return pieces, self._scatter(pieces)

    def _queries(self):
        """The query vectors' future, scattered once (another engine's, where they are the
        same: its sender may be scattering them meanwhile)."""
        if self._source is not None and self._source.query_vectors is self.query_vectors:
            return self._source._queries()
        with self._lock:
            if self._query_future is None and self.query_vectors is not None:
                self._query_future = self._scatter(self.query_vectors, True)
            return self._query_future

    def prepare(self) -> None:
        """Start scattering (:meth:`_sending`)."""
        self._sending()

    def _sending(self) -> concurrent.futures.Future:
        """Scatter what the passes read, once, from a thread of its own: it starts when the
        engine is prepared (a fit) or with the first question, so the data travel while
        this process chooses the grid, counts and decides (rank probes, Nyström factors)."""
        if self._sent is None:
            self._sent = self._sender.submit(self._send)
        return self._sent

    def _send(self):
        if self._source is None:  # (once per cluster and fit)
            self._warming = self._warm_up()
        columns = self._columns
        pieces = self._pieces if self.response_kernel != "rbf" else None  # (pairwise: blocks)
        self.__dict__.pop("_augmented", None)  # (the blocks and pieces hold their copies)
        return self._queries(), columns, pieces

    def _warm_up(self) -> list:
        """One :func:`~dask_tasks.warm_up` per worker thread, on that worker: a tile's
        buffer holds at most ``block_bytes`` of slabs, Y and transfers plus one query's
        share (the stretches are cut to fit), so a tenth more serves every tile. Their
        futures are kept until :meth:`close` (a released future may be cancelled)."""
        size = int(1.1 * self.block_bytes) // 8
        return [
            self._submit(
                warm_up, size, kind="warm", workers=[worker], allow_other_workers=False, pure=False
            )
            for worker, threads in self.client.nthreads().items()
            for _ in range(threads)
        ]

    def count_within(self, cutoffs: list[float]) -> list[int]:
        """Counted here, a block of query rows at a time (M² q flops; no M × M held)."""
        self._sending()
        if not cutoffs:
            return []
        n_q, counts = self.layout.n_queries, np.zeros(len(cutoffs), dtype=int)
        for lo, hi in even_edges(0, n_q, -(-16 * n_q * n_q // self.block_bytes)):
            sq = query_distances(self.query_vectors, np.arange(lo, hi), np.arange(n_q))
            counts += [np.count_nonzero(sq <= cutoff) for cutoff in cutoffs]
        return counts.tolist()

    def sums(self, query_kernels: list, factors: list[np.ndarray]):
        """N and Z (not symmetrised) of each query kernel and of each factor's ``Φ Φ^T``,
        from one set of tasks."""
        self._sending().result()
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
        common = {"query_vectors": self._queries(), "query_kernels": query_kernels}
        common["block_bytes"] = self.block_bytes
        if self._pieces is None:  # one block: a task's rows are its queries' responses in it
            spans, rows = max(1, n_q // dask_tasks.MIN_QUERY_SPAN), lambda a, b: (a, b)
            edges = [lo for lo, _ in even_edges(0, n_q, spans)] + [n_q]
        else:
            spans, futures = len(self._pieces[0]), self._pieces[1]
            rows, edges = lambda a, b: futures[a:b], range(spans + 1)
        places, tiles = [], []
        for index, (block, block_work) in enumerate(zip(blocks, work, strict=True)):
            share = max(1, round(tasks * block_work / total))
            row_bytes = 8 * width * self.layout.model_bounds[block.stop]
            query_runs = int(np.clip(max(share, -(-row_bytes // self.block_bytes)), 1, spans))
            for first, last in even_edges(0, block.n_models, -(-share // query_runs)):
                parts = [
                    self._submit(
                        kernel_tile, block_futures[index], first, last, rows(a, b), **common
                    )
                    for a, b in ((edges[a], edges[b]) for a, b in even_edges(0, spans, query_runs))
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
        common = {"query_vectors": self._queries(), "query_kernels": query_kernels}
        common.update(bandwidth=self.response_bandwidth, rows=rows)
        places, tiles = [], []
        for (a, b), pair_work in zip(pairs, work, strict=True):
            runs = round(tasks * pair_work / total)
            parts = [
                self._submit(pairwise_tile, futures[a], futures[b], lo, hi, **common)
                for lo, hi in even_edges(
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
