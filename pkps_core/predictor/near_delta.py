"""A query bandwidth so narrow that its kernel is the delta kernel plus a few pairs.

The PKPS query kernel ``kQ(u, u') = exp(−‖u − u'‖² / 2σ²)`` at the grid's smallest
bandwidths is 1 on the diagonal and, but for near-duplicate queries, below anything a sum
of floats can hold: on AlpacaEval-40 at σ = 0.025 × the median query distance, 232 of
647,220 off-diagonal entries exceed 1e-18. Its shadow sums are then the delta kernel's
(which the pass computes anyway, for σ = 0) plus the sums over those few pairs of queries,
instead of a dense product over every query: ``kQ = I + E`` with ``E`` the entries of
``kQ − I`` above :data:`NEAR_DELTA_TOL`, so

    N_σ[i, s] = N_0[i, s] + Σ_{(q, q') ∈ E} E[q, q'] Σ_{r ∈ i: q_r = q} Σ_{l ∈ s: q_l = q'} x_r·x_l

and ``Z`` likewise with 1 for ``x_r · x_l``. What is dropped weighs below 1e-18 per pair of
responses (unit rows): at most 1e-13 on a sum of 805 × 160 pairs.
"""

from __future__ import annotations

import numpy as np

NEAR_DELTA_TOL = 1e-18
NEAR_DELTA_PAIRS = 4  # at most this many pairs per query in E: a few near-duplicates each


def near_delta_pairs(query_kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(pairs, weights)`` of ``E = kQ − I`` above the tolerance (``pairs`` an (n, 2)
    array of query indices), or None where the kernel has more than
    :data:`NEAR_DELTA_PAIRS` such pairs per query (a dense product is then the cheaper)."""
    n = query_kernel.shape[0]
    off = query_kernel > NEAR_DELTA_TOL
    np.fill_diagonal(off, np.abs(np.diagonal(query_kernel) - 1.0) > NEAR_DELTA_TOL)
    if off.sum() > NEAR_DELTA_PAIRS * n:
        return None
    pairs = np.argwhere(off)
    weights = query_kernel[pairs[:, 0], pairs[:, 1]] - (pairs[:, 0] == pairs[:, 1])
    return pairs, weights


def near_delta_sums(layout, features, level, rows, shadow_models, near, n_levels):
    """The sums over the pairs of ``near`` (:func:`near_delta_pairs`) of every model in
    ``rows`` (model indices) with every shadow, per level (a pair counts from the level of
    its later response on): ``(numerator, denominator)``, (n_levels, n_models,
    n_shadows) each, to add to the delta kernel's."""
    pairs, weights = near
    model_idx, query_idx = layout.model_idx, layout.query_idx
    n_models, n_shadows = layout.n_models, len(shadow_models)
    owner = np.full(n_models, -1)
    owner[shadow_models] = np.arange(n_shadows)

    def by_query(responses):
        responses = responses[np.argsort(query_idx[responses], kind="stable")]
        edges = np.searchsorted(query_idx[responses], np.arange(layout.n_queries + 1))
        return responses, edges

    left, left_edges = by_query(np.flatnonzero(np.isin(model_idx, rows)))
    right, right_edges = by_query(np.flatnonzero(owner[model_idx] >= 0))
    cells, values, masses = [], [], []
    for (q, q2), weight in zip(pairs, weights, strict=True):
        r = left[left_edges[q] : left_edges[q + 1]]
        ell = right[right_edges[q2] : right_edges[q2 + 1]]
        if not len(r) or not len(ell):
            continue
        at = np.maximum(level[r][:, None], level[ell][None, :])
        cells.append(
            ((at * n_models + model_idx[r][:, None]) * n_shadows + owner[model_idx[ell]]).ravel()
        )
        values.append((weight * (features[r] @ features[ell].T)).ravel())
        masses.append(np.full(len(r) * len(ell), weight))
    shape = (n_levels, n_models, n_shadows)
    if not cells:
        return np.zeros(shape), np.zeros(shape)
    cells = np.concatenate(cells)
    size = n_levels * n_models * n_shadows
    numerator = np.bincount(cells, weights=np.concatenate(values), minlength=size)
    denominator = np.bincount(cells, weights=np.concatenate(masses), minlength=size)
    # a pair of responses is in every level from its later response's on
    return (
        np.cumsum(numerator.reshape(shape), axis=0),
        np.cumsum(denominator.reshape(shape), axis=0),
    )
