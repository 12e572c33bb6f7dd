"""The Dask engine's tasks: what a worker computes (:mod:`~pkps_core.space.dask_engine`
plans them, scatters their data and assembles their results in the client).

The responses travel with a last feature of ones (its transfer is the kernel mass, Z), in
*column blocks* of consecutive models (:class:`ColumnBlock`) and in *query pieces*
(:class:`QueryPiece`: every response to a range of queries). :func:`kernel_tile` takes a
column block and a run of query pieces and, per stretch s of those queries that fits
``block_bytes``, builds once what no bandwidth changes — the squared distances between the
block's queries and s, and Y over s of every model up to the block's last (the upper
triangle) — then per kernel the slab K_Q[Q_c, s] (truncated and sparse for the sparse path,
the indicator for delta), the transfer of the block's models and its contraction with Y.
:func:`pairwise_tile` (RBF response kernel) computes the response kernel of a pair of
blocks once for all query kernels; :func:`project` and :func:`inner_tile` are the Nyström
factors' sums. They call the array functions the local backend calls
(:func:`~pkps_core.space.sums.transfer_models`, ``scatter_y``, ``pairwise.pairwise_rows``,
``project_models``; :func:`~pkps_core.space.kernels.rbf_from_squared`), so both give one D.
A task's memory is a small multiple of ``block_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.pairwise import pairwise_rows
from pkps_core.space.runtime import borrow_buffer
from pkps_core.space.sums import project_models, scatter_y, transfer_models

SPARSE_SLAB_DENSITY = 0.1  # truncated kernel slabs this sparse are multiplied as CSR
MIN_QUERY_SPAN = 64  # queries of a query piece, at least


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
    each query kernel: arrays of shape (kernels, rows, last − first). ``pieces`` may be a
    range of queries (q_lo, q_hi) instead, where the block holds every row (one block)."""
    lo_r, hi_r = column.bounds[first], column.bounds[last]
    bounds = column.bounds[first : last + 1] - lo_r
    features_t = column.features_t[:, lo_r:hi_r]
    features, query = features_t.T, column.query[lo_r:hi_r]
    queries, local_query = np.unique(query, return_inverse=True)
    local_query = local_query.ravel()
    width, k, n_rows = features_t.shape[0], last - first, column.start + last
    numerator = np.zeros((len(query_kernels), n_rows, k))
    denominator = np.zeros_like(numerator)
    if isinstance(pieces, tuple):  # the block's own responses to the queries [q_lo, q_hi)
        (q_lo, q_hi), row_query = pieces, column.query[: column.bounds[last]]
        rows = np.flatnonzero((row_query >= q_lo) & (row_query < q_hi))
        row_owner = np.repeat(np.arange(column.start, n_rows), np.diff(column.bounds[: last + 1]))
        row_owner, row_query = row_owner[rows], row_query[rows]
        row_features = np.ascontiguousarray(column.features_t[:, rows].T)
    else:
        row_owner, row_query, row_features = (
            np.concatenate([getattr(piece, name) for piece in pieces])
            for name in ("owner", "query", "features")
        )
        rows = row_owner < n_rows  # the upper triangle
        row_owner, row_query, row_features = row_owner[rows], row_query[rows], row_features[rows]
        q_lo, q_hi = pieces[0].q_lo, pieces[-1].q_hi
    owner = np.repeat(np.arange(k), np.diff(bounds))
    per_query = 8 * ((n_rows + 2 * k) * width + 2 * len(queries))  # Y, T, distances, kernel
    stretches = even_edges(q_lo, q_hi, -(-(q_hi - q_lo) * per_query // block_bytes))
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


def warm_up(size: int) -> None:
    """A worker's first task of a fit, run while the data are still travelling: it
    imports this module (the tiles' code) and leaves a buffer of ``size`` elements, every
    page touched, in the worker's idle list, so that the first tile pays neither."""
    with borrow_buffer(size) as buffer:
        buffer[::512] = 0.0  # one element per 4 KiB page


def even_edges(lo: int, hi: int, parts: int):
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
    response kernel over every response pair (:func:`~pkps_core.space.pairwise.pairwise_rows`),
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
