"""A few new models' kernel sums with every fitted model, straight from their responses.

:func:`~pkps_core.predictor.shadow_sums.shadow_pair_sums` factors the sums of Eq. 1
through the queries: per block of queries, every dense row's per-query sums ``Y_i[q]``
(a fill of n_rows × n_queries × p numbers) meet each new model's kernel-weighted sums
``W_s[q]``. That pays off for many new models at once; for one new model of a few dozen
responses the fill costs more than the sums themselves (29 MB on AlpacaEval-40, 0.3–0.4 s
in a fresh process). Here the same sums come from the Gram matrix of the fitted
responses with the new ones,

    N[i, s] = Σ_{r ∈ i} Σ_{l ∈ s} kQ(u_{q_r}, u_{q_l}) x_r · x_l,
    Z[i, s] = Σ_{r ∈ i} Σ_{l ∈ s} kQ(u_{q_r}, u_{q_l}),

the query kernel evaluated only at the new responses' queries: R × L products for R
fitted and L new responses, used while R × L stays below :data:`DIRECT_MAX_PAIRS`.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from pkps_core.space import kernels

DIRECT_MAX_PAIRS = 1 << 22  # R × L: the Gram matrix and one kernel weight matrix, 32 MB each


def direct_pair_sums(
    layout: kernels.ResponseLayout,
    features: np.ndarray,
    query_vectors: np.ndarray | None,
    bandwidths,
    new: np.ndarray,
    rows: np.ndarray,
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """What :func:`~pkps_core.predictor.shadow_sums.shadow_pair_sums` returns for the new
    models as its shadows (per bandwidth, numerator and denominator, each (n_models,
    n_new): the ``rows`` models' sums with every new model, each new model's sum with
    itself, 0 elsewhere), or None when the fitted × new response pairs exceed
    :data:`DIRECT_MAX_PAIRS` (the factored pass is then cheaper).

    ``query_vectors`` None or a bandwidth ≤ 0: the delta query kernel."""
    new = np.asarray(new, dtype=bool)
    new_models = np.flatnonzero(new)
    row_models = np.flatnonzero(np.asarray(rows, dtype=bool) & ~new)
    fitted, fitted_owner = _responses_of(layout, row_models)
    added, added_owner = _responses_of(layout, new_models)
    if len(fitted) * len(added) > DIRECT_MAX_PAIRS:
        return None
    query_idx = layout.query_idx
    fitted_queries, added_queries = query_idx[fitted], query_idx[added]
    gram = features[fitted] @ features[added].T
    # (fitted responses × fitted rows) and (new responses × new models) one-hot sums
    to_rows = sparse.csr_matrix(
        (np.ones(len(fitted)), (fitted_owner, np.arange(len(fitted)))),
        shape=(len(row_models), len(fitted)),
    )
    to_new = sparse.csr_matrix(
        (np.ones(len(added)), (np.arange(len(added)), added_owner)),
        shape=(len(added), len(new_models)),
    )
    distinct, column = np.unique(added_queries, return_inverse=True)
    squared = None
    if query_vectors is not None:
        squared = kernels.squared_distances(query_vectors, query_vectors[distinct])
    out = []
    for sigma in np.asarray(bandwidths, dtype=float):
        if squared is None or sigma <= 0:
            weight = (fitted_queries[:, None] == added_queries[None, :]).astype(float)
            own_kernel = None
        else:
            own_kernel = kernels.rbf_from_squared(squared, float(sigma))  # (n_queries, distinct)
            weight = own_kernel[fitted_queries][:, column]
        numerator = np.zeros((layout.n_models, len(new_models)))
        denominator = np.zeros((layout.n_models, len(new_models)))
        numerator[row_models] = to_rows @ ((weight * gram) @ to_new)
        denominator[row_models] = to_rows @ (weight @ to_new)
        for k, model in enumerate(new_models):  # each new model with itself
            own = added_owner == k
            queries = added_queries[own]
            if own_kernel is None:
                pair_weight = (queries[:, None] == queries[None, :]).astype(float)
            else:
                pair_weight = own_kernel[queries][:, column[own]]
            vectors = features[added[own]]
            numerator[model, k] = np.sum(pair_weight * (vectors @ vectors.T))
            denominator[model, k] = pair_weight.sum()
        out.append((numerator, denominator))
    return out


def _responses_of(layout: kernels.ResponseLayout, models: np.ndarray):
    """The responses of ``models`` (ascending model indices; the layout is sorted by model)
    and each one's position in ``models``."""
    wanted = np.zeros(layout.n_models, dtype=bool)
    wanted[models] = True
    responses = np.flatnonzero(wanted[layout.model_idx])
    return responses, np.searchsorted(models, layout.model_idx[responses])
