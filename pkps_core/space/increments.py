"""Incremental kernel sums: what adding responses changes in the sums of Eq. (1).

The sums are over response pairs, so new responses add only the pairs that involve them;
:meth:`pkps_core.space.PerspectiveSpace.update` uses this to refit without recomputing
everything.
"""

from __future__ import annotations

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.runtime import WorkerPool


def increment_sums(
    layout: kernels.ResponseLayout,
    features: np.ndarray,
    query_vectors: np.ndarray | None,
    bandwidth: float,
    new_mask: np.ndarray,
    response_kernel: str = "linear",
    response_bandwidth: float = 1.0,
    *,
    pool: WorkerPool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The change of the kernel sums when the responses in ``new_mask`` are added.

    With ``C[i, j]`` the sum over pairs (any response of model i, a *new* response of
    model j) and ``DD`` the same over new × new pairs, the sums over all pairs are
    ``old + C + C^T - DD``. Only the columns of models with new responses are non-zero in
    C, so the cost is proportional to the number of new responses.

    Returns
    -------
    numerator_increment, denominator_increment : ndarray (n_models, n_models)
    """
    n = layout.n_models
    features, response_kernel = kernels.linear_form(features, response_kernel)
    new_rows = np.flatnonzero(new_mask)
    cross_num = np.zeros((n, n))
    cross_den = np.zeros((n, n))
    both_num = np.zeros((n, n))
    both_den = np.zeros((n, n))
    if new_rows.size == 0:
        return cross_num, cross_den
    query_idx, model_idx = layout.query_idx, layout.model_idx
    if response_kernel == "linear":
        p = features.shape[1]
        augmented = np.hstack([features, np.ones((layout.n_responses, 1))])
        for model in np.unique(model_idx[new_rows]):
            rows = new_rows[model_idx[new_rows] == model]
            if bandwidth > 0:
                columns = kernels.rbf_from_squared(
                    kernels.squared_distances(
                        query_vectors, query_vectors[query_idx[rows]], pool=pool
                    ),
                    bandwidth,
                )
                transfer = columns @ augmented[rows]
            else:
                transfer = np.zeros((layout.n_queries, p + 1))
                np.add.at(transfer, query_idx[rows], augmented[rows])
            gathered = transfer[query_idx]
            values_num = np.einsum("rc,rc->r", features, gathered[:, :p])
            values_den = gathered[:, p]
            cross_num[:, model] = np.bincount(model_idx, values_num, minlength=n)
            cross_den[:, model] = np.bincount(model_idx, values_den, minlength=n)
            both_num[:, model] = np.bincount(model_idx[new_rows], values_num[new_rows], minlength=n)
            both_den[:, model] = np.bincount(model_idx[new_rows], values_den[new_rows], minlength=n)
    else:
        sq_norms = np.einsum("ij,ij->i", features, features)
        col_starts = layout.model_bounds[:-1]
        is_new = np.zeros(layout.n_responses, dtype=bool)
        is_new[new_rows] = True
        for start in range(0, new_rows.size, 512):
            rows = new_rows[start : start + 512]
            if bandwidth > 0:
                kq = kernels.rbf_from_squared(
                    kernels.squared_distances(
                        query_vectors[query_idx[rows]], query_vectors[query_idx]
                    ),
                    bandwidth,
                )
            else:
                kq = (query_idx[rows, None] == query_idx[None, :]).astype(float)
            kr = kernels.response_kernel_block(
                features[rows], features, "rbf", response_bandwidth, sq_norms[rows], sq_norms
            )
            owner = np.zeros((rows.size, n))
            owner[np.arange(rows.size), model_idx[rows]] = 1.0
            product, mass = kq * kr, kq
            cross_num += (owner.T @ np.add.reduceat(product, col_starts, axis=1)).T
            cross_den += (owner.T @ np.add.reduceat(mass, col_starts, axis=1)).T
            product_new = np.where(is_new[None, :], product, 0.0)
            mass_new = np.where(is_new[None, :], mass, 0.0)
            both_num += (owner.T @ np.add.reduceat(product_new, col_starts, axis=1)).T
            both_den += (owner.T @ np.add.reduceat(mass_new, col_starts, axis=1)).T
    numerator = cross_num + cross_num.T - both_num
    denominator = cross_den + cross_den.T - both_den
    return numerator, denominator
