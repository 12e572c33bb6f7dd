"""Exact sums of a non-factorisable response kernel (RBF) on a (nearly) paired cache,
every query bandwidth in one pass.

When (nearly) every model answered the same queries (AlpacaEval-40: 40 models, 805 queries,
6 of the 32,200 cells empty), the responses fill an ``M × Q`` grid and every block of the
query kernel between two models is the same ``Q × Q`` matrix. The pairwise path
(:func:`~pkps_core.space.pairwise.pairwise_sums`) gathers that block for every response pair
and recomputes the response kernel for every bandwidth; here the response kernel of a block
of rows is computed once, and each row's sums against every model, for all ``B`` query
kernels at once, are one small matrix product ``k_R(row, model's responses) @ K_Q[row's
query, :, :B]``. Empty cells are zero rows of weight 0. Same numbers, to rounding
(``tests/test_paired_sums.py``).

The delta kernel alone (DKPS) pairs only responses to the same query: one ``M × M`` response
kernel per query, ``O(Q M² p)`` instead of ``O(N² p)``.
"""

from __future__ import annotations

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.pairwise import pairwise_grid_sums

# Above this the stacked query kernels (Q × Q × B) are not worth their memory.
PAIRED_KERNELS_MAX_BYTES = 512 * 2**20
# Below this share of the M × Q grid answered, padding the missing cells costs too much.
MIN_GRID_DENSITY = 0.9


def response_grid(layout) -> tuple[np.ndarray, np.ndarray] | None:
    """``(queries, cell)`` when the responses nearly fill the models × queries grid (at least
    :data:`MIN_GRID_DENSITY` of its cells; a layout holds a model's answer to a query at
    most once): the unique queries and each response's cell ``model · Q + position of its
    query``; else None."""
    if layout.n_models == 0 or layout.n_responses == 0:
        return None
    queries = np.unique(layout.query_idx)
    if layout.n_responses < MIN_GRID_DENSITY * layout.n_models * len(queries):
        return None
    cell = layout.model_idx * len(queries) + np.searchsorted(queries, layout.query_idx)
    return queries, cell


def fits_in_memory(n_queries: int, n_kernels: int) -> bool:
    """Whether the stacked query kernels of a paired pass fit :data:`PAIRED_KERNELS_MAX_BYTES`."""
    return n_queries * n_queries * max(n_kernels, 1) * 8 <= PAIRED_KERNELS_MAX_BYTES


def backend_grid_sums(backend, bandwidths: list[float]):
    """:func:`paired_sums` of a local backend's cache at ``bandwidths`` (0: delta); on an
    unpaired cache :func:`unpaired_grid_sums`; None when the stacked kernels would not fit."""
    grid = response_grid(backend.layout)
    if grid is None:
        return unpaired_grid_sums(backend, bandwidths)
    if not fits_in_memory(len(grid[0]), len(bandwidths)):
        return None
    queries, cell = grid
    blocks = [
        None
        if b <= 0
        else kernels.rbf_from_squared(backend.query_sqdist[np.ix_(queries, queries)], b)
        for b in bandwidths
    ]
    return paired_sums(
        backend.layout.n_models,
        len(queries),
        cell,
        backend.features,
        blocks,
        backend.response_kernel,
        backend.response_bandwidth,
        backend.block_bytes,
    )


def unpaired_grid_sums(backend, bandwidths: list[float]):
    """The pairwise sums of every bandwidth in one pass over the response pairs of any
    cache (:func:`~pkps_core.space.pairwise.pairwise_grid_sums`: a block's response kernel
    computed once for all, each kernel's sums the same numbers as one pass of its own), when
    the query kernels fit :data:`PAIRED_KERNELS_MAX_BYTES` side by side; else None. Where
    the unique queries' pairs outnumber half the response pairs (queries seldom shared),
    each block's query kernels are made from its pairs' distances instead of whole."""
    positive = [b for b in bandwidths if b > 0]
    layout = backend.layout
    if len(bandwidths) < 2 or not fits_in_memory(layout.n_queries, len(positive)):
        return None
    sq, pool = backend.query_sqdist if positive else None, backend.pool
    by_block = layout.n_queries**2 > layout.n_responses**2 / 2
    return pairwise_grid_sums(
        layout,
        backend.features,
        [
            None if b <= 0 else float(b) if by_block else kernels.rbf_from_squared(sq, b, pool=pool)
            for b in bandwidths
        ],
        backend.response_kernel,
        backend.response_bandwidth,
        backend.block_bytes,
        query_sqdist=sq,
    )


def paired_sums(
    n_models: int,
    n_queries: int,
    cell: np.ndarray,
    features: np.ndarray,
    query_kernels: list[np.ndarray | None],
    response_kernel: str,
    response_bandwidth: float,
    block_bytes: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """N and Z (not symmetrised) of each query kernel (``Q × Q`` over the grid's queries;
    ``None``: the delta kernel), as :func:`~pkps_core.space.pairwise.pairwise_sums` gives them.

    The responses sit in the ``n_models × n_queries`` grid at ``cell`` (model-major); empty
    cells are zero rows with weight 0, so they add nothing.
    """
    m, q = n_models, n_queries
    grid = np.zeros((m * q, features.shape[1]))
    grid[cell] = features
    weight = np.zeros(m * q)
    weight[cell] = 1.0
    answered = weight.reshape(m, q)
    if all(kernel is None for kernel in query_kernels):
        delta = _delta_sums(grid, answered, response_kernel, response_bandwidth)
        return [delta for _ in query_kernels]
    stacked = np.stack([np.eye(q) if k is None else k for k in query_kernels], axis=-1)
    numerator = np.zeros((len(query_kernels), m, m))
    sq = np.einsum("ij,ij->i", grid, grid)
    n = m * q
    rows = int(max(1, min(n, block_bytes // (3 * 8 * n))))
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        # N is symmetric: each row sums against its own model and the later ones only
        first = (start // q) * q
        kr = kernels.response_kernel_block(
            grid[start:stop], grid[first:], response_kernel, response_bandwidth, sq_cols=sq[first:]
        )
        kr *= weight[None, first:]
        kr *= weight[start:stop, None]
        position = np.arange(start, stop) % q
        per_row = np.matmul(kr.reshape(stop - start, -1, q), stacked[position])  # (rows, M', B)
        owner = np.arange(start, stop) // q  # rows are grouped by model
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        summed = np.add.reduceat(per_row, starts, axis=0)  # (row models, M', B)
        numerator[:, owner[starts], first // q :] += np.moveaxis(summed, -1, 0)
    upper = np.triu(np.ones((m, m), dtype=bool))
    numerator = np.where(upper, numerator, np.swapaxes(numerator, 1, 2))  # mirror
    return [
        (numerator[b], answered @ stacked[:, :, b] @ answered.T) for b in range(len(query_kernels))
    ]


def _delta_sums(grid, answered, response_kernel: str, response_bandwidth: float):
    """The delta kernel's N and Z on the grid: per query, the response kernel among the
    models that answered it."""
    m, q = answered.shape
    by_query = grid.reshape(m, q, -1)
    numerator = np.zeros((m, m))
    for j in range(q):
        block = kernels.response_kernel_block(
            by_query[:, j], by_query[:, j], response_kernel, response_bandwidth
        )
        numerator += block * np.outer(answered[:, j], answered[:, j])
    return numerator, answered @ answered.T
