"""PKPS Eq. (1) as written: O(N²) loops, for reading and for testing the fast paths.

    A_ii' = Σ_{j ∈ Q_i} Σ_{l ∈ Q_i'} k_Q(u_j, u_l) k_R(x_ij, x_i'l)
            / Σ_{j ∈ Q_i} Σ_{l ∈ Q_i'} k_Q(u_j, u_l)

Every model pair, every pair of their responses, one kernel value at a time, exactly as the
equation is written (the PKPS paper, section 3). This is where to start reading the space:
then :mod:`~pkps_core.space.kernels` (the same kernels on arrays, and D from A),
:mod:`~pkps_core.space.sums` and :mod:`~pkps_core.space.pairwise` (the sums of Eq. (1) fast
and exact), :mod:`~pkps_core.space.affinity` (which path each bandwidth takes). Nothing in
the package calls it; ``tests/test_kernels.py`` holds every fast path to it.
"""

from __future__ import annotations

import numpy as np


def affinity_as_written(
    model_idx,
    query_emb,
    query_ids,
    responses,
    query_kernel,
    bandwidth,
    response_kernel,
    response_bandwidth=1.0,
    self_pairs="include",
):
    """A and the denominator sums of Eq. (1) for every model pair, by loops.

    ``model_idx``, ``query_ids``: each response's model and query; ``query_emb``: each
    response's query vector u_j; ``responses``: the response vectors x_ij. ``query_kernel``
    ``"delta"`` (DKPS: k_Q(u, u') = [u = u']) or the RBF of ``bandwidth``; ``response_kernel``
    ``"linear"``, ``"cosine"`` or ``"rbf"`` (of ``response_bandwidth``). ``self_pairs=
    "exclude"`` leaves out each response's pair with itself (j = l within a model). Returns
    (A, mass), models in sorted order; A is NaN where the mass is 0.
    """
    models = sorted(set(model_idx.tolist()))
    n = len(models)
    affinity = np.full((n, n), np.nan)
    mass = np.zeros((n, n))
    for a in range(n):
        rows_a = np.flatnonzero(model_idx == models[a])
        for b in range(n):
            rows_b = np.flatnonzero(model_idx == models[b])
            num = den = 0.0
            for j in rows_a:
                for l in rows_b:  # noqa: E741 (the paper's index)
                    if self_pairs == "exclude" and a == b and j == l:
                        continue
                    if query_kernel == "delta":
                        kq = 1.0 if query_ids[j] == query_ids[l] else 0.0
                    else:
                        diff = query_emb[j] - query_emb[l]
                        kq = np.exp(-diff @ diff / (2 * bandwidth**2))
                    x, y = responses[j], responses[l]
                    if response_kernel == "linear":
                        kr = x @ y
                    elif response_kernel == "cosine":
                        kr = x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
                    else:
                        diff = x - y
                        kr = np.exp(-diff @ diff / (2 * response_bandwidth**2))
                    num += kq * kr
                    den += kq
            mass[a, b] = den
            if den > 0:
                affinity[a, b] = num / den
    return affinity, mass
