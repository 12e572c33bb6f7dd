"""The pairwise path of the kernel sums of Eq. (1): any response kernel (the RBF, which does
not factorise), summed over blocks of response pairs in O(N^2 p).

Blocks of response rows go against the responses of their own models and the later ones
(both kernels are symmetric: the upper triangle of model pairs, half the response pairs); a
block's response kernel is computed once for every query kernel asked for, so a grid of
bandwidths costs one pass (:func:`pairwise_grid_sums`). The factorised path of a linear or
cosine response kernel is :mod:`pkps_core.space.sums`; a (nearly) paired cache has its own
one-pass sums (:mod:`pkps_core.space.paired_sums`).
"""

from __future__ import annotations

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.kernels import ResponseLayout


def pairwise_block(
    query_kernel: np.ndarray, response_kernel: np.ndarray, row_starts, col_starts
) -> tuple[np.ndarray, np.ndarray]:
    """N and Z of one block of response pairs: ``Σ kQ kR`` and ``Σ kQ`` per (row model,
    column model), rows and columns grouped by model from ``row_starts`` / ``col_starts``
    (positions where a model's responses begin)."""
    product = np.add.reduceat(query_kernel * response_kernel, col_starts, axis=1)
    mass = np.add.reduceat(query_kernel, col_starts, axis=1)
    return np.add.reduceat(product, row_starts, axis=0), np.add.reduceat(mass, row_starts, axis=0)


def pairwise_rows(
    x_rows, owner, x_cols, col_starts, query_kernels, response_kernel, response_bandwidth, rows
) -> tuple[np.ndarray, np.ndarray]:
    """N and Z of response rows (of the models ``owner``, sorted) against response
    columns (grouped by model from ``col_starts``), ``rows`` rows at a time, for several
    query kernels: ``query_kernels(chunk)`` gives each one's block for the rows ``chunk``;
    the response kernel is computed once for all. Shape (kernels, models up to the last
    of ``owner``, column models)."""
    sq_cols = np.einsum("ij,ij->i", x_cols, x_cols)
    found: list[np.ndarray] = []  # per kernel, (2, models, column models)
    for start in range(0, len(x_rows), rows):
        chunk = slice(start, min(len(x_rows), start + rows))
        kr = kernels.response_kernel_block(
            x_rows[chunk], x_cols, response_kernel, response_bandwidth, sq_cols=sq_cols
        )
        models = owner[chunk]
        starts = np.flatnonzero(np.r_[True, models[1:] != models[:-1]])
        for index, kq in enumerate(query_kernels(chunk)):  # may come one at a time
            if index == len(found):
                found.append(np.zeros((2, owner[-1] + 1, len(col_starts))))
            found[index][:, models[starts]] += pairwise_block(kq, kr, starts, col_starts)
    sums = np.stack(found, axis=1)
    return sums[0], sums[1]


def pairwise_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernel: np.ndarray | None,
    response_kernel: str,
    response_bandwidth: float,
    block_bytes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Any kernel pair, by blocks of response rows against all responses: O(N^2 p)."""
    return pairwise_grid_sums(
        layout, features, [query_kernel], response_kernel, response_bandwidth, block_bytes
    )[0]


def pairwise_grid_sums(
    layout: ResponseLayout,
    features: np.ndarray,
    query_kernels: list[np.ndarray | float | None],
    response_kernel: str,
    response_bandwidth: float,
    block_bytes: int,
    *,
    query_sqdist: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`pairwise_sums` of several query kernels (``None``: delta) in one pass, each
    block's response kernel computed once for all: the same blocks, summed in the same
    order, so the same numbers as a pass per kernel.

    A kernel given as a bandwidth (a float > 0) is the RBF of ``query_sqdist`` (the unique
    queries' squared distances), made block by block from the distances of the block's
    response pairs, gathered once for all such kernels: where the queries are about as many
    as the responses (an unpaired cache), that is half the exponentials of the whole
    ``Q × Q`` kernel and one gather per block instead of one per kernel; the entries are
    :func:`~pkps_core.space.kernels.rbf_from_squared`'s.

    Both kernels are symmetric, so N and Z are: a block of response rows sums against the
    responses of its own first model and the later models only, and the lower triangle is
    the upper one's transpose (half the response pairs). Entry (i, j ≥ i) is complete: every
    block holding a row of model i starts at a model ≤ i ≤ j, so it sums all of j's
    responses.
    """
    if query_sqdist is None and any(isinstance(k, float) for k in query_kernels):
        raise ValueError("a query kernel given as a bandwidth needs query_sqdist")
    n_resp, query, owner = layout.n_responses, layout.query_idx, layout.model_idx
    bounds = layout.model_bounds
    rows = int(max(1, min(n_resp, block_bytes // (3 * 8 * max(n_resp, 1)))))
    sq = np.einsum("ij,ij->i", features, features)
    shape = (layout.n_models, layout.n_models)
    sums = [(np.zeros(shape), np.zeros(shape)) for _ in query_kernels]
    for start in range(0, n_resp, rows):
        chunk = slice(start, min(n_resp, start + rows))
        first_model = owner[start]
        first = bounds[first_model]
        kr = kernels.response_kernel_block(
            features[chunk],
            features[first:],
            response_kernel,
            response_bandwidth,
            sq_cols=sq[first:],
        )
        models = owner[chunk]
        starts = np.flatnonzero(np.r_[True, models[1:] != models[:-1]])
        col_starts = bounds[first_model:-1] - first
        distances = None
        for kernel, (numerator, denominator) in zip(query_kernels, sums, strict=True):
            if kernel is None:
                kq = (query[chunk, None] == query[None, first:]).astype(float)
            elif isinstance(kernel, float):
                if distances is None:
                    distances = query_sqdist[query[chunk]][:, query[first:]]
                kq = kernels.rbf_from_squared(distances, kernel)
            else:
                kq = kernel[query[chunk]][:, query[first:]]
            n, z = pairwise_block(kq, kr, starts, col_starts)
            numerator[models[starts], first_model:] += n
            denominator[models[starts], first_model:] += z
    return [(_from_upper(n), _from_upper(z)) for n, z in sums]


def _from_upper(matrix: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose upper triangle (diagonal included) is ``matrix``'s."""
    return np.triu(matrix) + np.triu(matrix, 1).T
