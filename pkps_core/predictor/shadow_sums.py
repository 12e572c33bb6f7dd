"""The kernel sums a profile's shadows add to the references' own: every bandwidth, one pass.

A profile's space is the references and their shadows (:mod:`pkps_core.methods.shadows`).
The references' pairs are the same for every profile, so they are summed once
(:meth:`pkps_core.predictor.ReferencePredictor` keeps the references' own fit); a profile
only adds the pairs that involve a shadow. For the linear response kernel (unit rows: the
cosine kernel too) these factor through the queries, as the local engine's exact path does
(``space/sums.py``): with ``Y_i[q] = Σ_{r ∈ i, q_r = q} x_r`` (model i's responses summed
per query) and, for a shadow s, ``W_s[q] = Σ_{l ∈ s} kQ(u_q, u_{q_l}) x_l``,

    N[i, s] = Σ_q Y_i[q] · W_s[q],        Z[i, s] = Σ_q c_i[q] w_s[q]

(``c_i[q]`` model i's responses to q, ``w_s[q] = Σ_{l ∈ s} kQ(u_q, u_{q_l})``): one matrix
product over the queries per bandwidth instead of a pass over every response per shadow.
The queries are taken in blocks so memory stays bounded.
"""

from __future__ import annotations

import numpy as np

from pkps_core.space import kernels

BLOCK_BYTES = 64 * 2**20


def shadow_pair_sums(
    layout: kernels.ResponseLayout,
    features: np.ndarray,
    query_vectors: np.ndarray | None,
    bandwidths: np.ndarray,
    shadows: np.ndarray,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per bandwidth, the numerator and denominator sums of every model with every shadow.

    Parameters
    ----------
    layout : ResponseLayout
        All responses (references and shadows), sorted by model.
    features : ndarray (n_responses, p)
        Response vectors as the linear response kernel reads them.
    query_vectors : ndarray (n_queries, d) or None
        None: the delta query kernel (bandwidths are ignored).
    bandwidths : ndarray
        Query-kernel bandwidths (0: the delta limit).
    shadows : ndarray of bool (n_models,)

    Returns
    -------
    list of (numerator, denominator), ndarray (n_models, n_shadows) each, shadows in
    model order.
    """
    model_idx, query_idx = layout.model_idx, layout.query_idx
    n_models, n_queries = layout.n_models, layout.n_queries
    p = features.shape[1]
    shadow_models = np.flatnonzero(shadows)
    shadow_rows = [
        np.arange(layout.model_bounds[s], layout.model_bounds[s + 1]) for s in shadow_models
    ]
    rows_per_block = max(1, BLOCK_BYTES // (8 * p * max(n_models, len(shadow_models))))
    squared = None
    if query_vectors is not None:
        squared = kernels.squared_distances(query_vectors)
    bandwidths = np.asarray(bandwidths, dtype=float)
    kernels_by_bandwidth = [
        None
        if squared is None or sigma <= 0  # delta: kQ(u_q, u_q') = [q == q']
        else kernels.rbf_from_squared(squared, float(sigma))
        for sigma in bandwidths
    ]
    numerators = np.zeros((len(bandwidths), n_models, len(shadow_models)))
    denominators = np.zeros((len(bandwidths), n_models, len(shadow_models)))
    for start in range(0, n_queries, rows_per_block):
        block = np.arange(start, min(start + rows_per_block, n_queries))
        y, counts = _per_query_sums(model_idx, query_idx, features, block, n_models)
        y = y.reshape(n_models, -1)
        for b, query_kernel in enumerate(kernels_by_bandwidth):
            w = np.zeros((len(shadow_models), len(block), p))
            mass = np.zeros((len(shadow_models), len(block)))
            for k, rows in enumerate(shadow_rows):
                if query_kernel is None:
                    inside = (query_idx[rows] >= block[0]) & (query_idx[rows] <= block[-1])
                    w[k, query_idx[rows][inside] - block[0]] = features[rows][inside]
                    mass[k, query_idx[rows][inside] - block[0]] = 1.0
                else:
                    columns = query_kernel[np.ix_(block, query_idx[rows])]
                    w[k] = columns @ features[rows]
                    mass[k] = columns.sum(axis=1)
            numerators[b] += y @ w.reshape(len(shadow_models), -1).T
            denominators[b] += counts @ mass.T
    return [(numerators[b], denominators[b]) for b in range(len(bandwidths))]


def _per_query_sums(model_idx, query_idx, features, block, n_models):
    """``Y_i[q]`` and ``c_i[q]`` for the queries in ``block`` (contiguous); a model answers
    a query at most once (:class:`~pkps_core.space.kernels.ResponseLayout`), so each is
    one response's vector or zero."""
    inside = (query_idx >= block[0]) & (query_idx <= block[-1])
    y = np.zeros((n_models, len(block), features.shape[1]))
    counts = np.zeros((n_models, len(block)))
    local = query_idx[inside] - block[0]
    y[model_idx[inside], local] = features[inside]
    counts[model_idx[inside], local] = 1.0
    return y, counts
