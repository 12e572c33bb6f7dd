"""A slow, obviously-correct implementation of PKPS Eq. (1): the test oracle.

Loops over model pairs and over every pair of their responses, exactly as the equation
is written. Used only to check the fast paths in :mod:`pkps_core.space.sums`.
"""

import numpy as np


def oracle_affinity(
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
