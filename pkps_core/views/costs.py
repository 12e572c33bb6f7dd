"""What a perspective-space fit will cost, said before it runs (plain numpy, no streamlit).

Linear and cosine response kernels take the factorised path, O(M N p) for M models and N
responses; the RBF response kernel cannot be factorised and sums over every pair of
responses, O(N² p), once per bandwidth of the cross-validation grid (32k responses: three
minutes). On a (nearly) paired cache the whole grid takes one pass over half the pairs
(:mod:`pkps_core.space.paired_sums`: AlpacaEval-40 in seconds). :func:`rbf_fit_seconds`
times the real sum on a sample of the same shape and scales it to N².
"""

from __future__ import annotations

import time

import numpy as np

from pkps_core.space import BANDWIDTH_GRID, paired_sums
from pkps_core.space.kernels import ResponseLayout
from pkps_core.space.pairwise import pairwise_sums
from pkps_core.space.sums import DEFAULT_BLOCK_BYTES

# The response features after PCA (at most 48 components) and the score column.
MAX_FEATURES = 49
SAMPLE_RESPONSES = 2000
# The paired pass has a per-row overhead that a small sample overstates (2,000: 1.9× the
# real AlpacaEval-40 pass; 6,000: 1.2×).
PAIRED_SAMPLE_RESPONSES = 6000


def rbf_passes(query_kernel: str) -> int:
    """Pair sums the Perspective page runs with the RBF response kernel: one per grid
    bandwidth of the cross-validated PKPS fit (none with the delta kernel) and one for
    the DKPS panel."""
    return (len(BANDWIDTH_GRID) if query_kernel == "rbf" else 0) + 1


def rbf_fit_seconds(
    n_responses: int,
    n_models: int,
    n_features: int,
    passes: int,
    *,
    sample: int = SAMPLE_RESPONSES,
    random_state: int = 0,
    paired: bool = False,
) -> float:
    """Estimated seconds of ``passes`` RBF pair sums over ``n_responses`` responses.

    One pair sum of ``sample`` responses (same models and feature width) is timed on this
    machine and scaled by ``(n_responses / sample)²``; the estimate is rough (±50%: the
    machine's load changes) but of the right order, which is what the warning needs. With
    ``paired`` (the cache fills its models × queries grid) the grid's ``passes - 1`` query
    kernels share one paired pass, timed so, and DKPS's delta pass costs next to nothing.
    """
    rng = np.random.default_rng(random_state)
    if paired:
        n = int(min(max(n_responses, 1), max(sample, PAIRED_SAMPLE_RESPONSES)))
        kernels = max(passes - 1, 1)
        _time_paired_sum(min(n, 400), n_models, n_features, kernels, rng)  # first use
        elapsed = min(_time_paired_sum(n, n_models, n_features, kernels, rng) for _ in range(2))
        return float(elapsed * (n_responses / n) ** 2)
    n = int(min(max(n_responses, 1), sample))
    _time_pair_sum(min(n, 400), n_models, n_features, rng)  # first use: threads, pages
    elapsed = min(_time_pair_sum(n, n_models, n_features, rng) for _ in range(2))
    return float(passes * elapsed * (n_responses / n) ** 2)


def _time_paired_sum(n: int, n_models: int, n_features: int, n_kernels: int, rng) -> float:
    """Seconds of one paired pass over about ``n`` synthetic responses in a full grid."""
    models = int(min(max(n_models, 1), n))
    queries = max(1, n // models)
    features = rng.normal(size=(models * queries, int(max(n_features, 1))))
    kernel = np.exp(-rng.random((queries, queries)))
    cell = np.arange(models * queries)
    start = time.perf_counter()
    paired_sums.paired_sums(
        models, queries, cell, features, [kernel] * n_kernels, "rbf", 1.0, DEFAULT_BLOCK_BYTES
    )
    return time.perf_counter() - start


def _time_pair_sum(n: int, n_models: int, n_features: int, rng) -> float:
    """Seconds of one RBF pair sum over ``n`` synthetic responses."""
    models = int(min(max(n_models, 1), n))
    p = int(min(max(n_features, 1), MAX_FEATURES))
    layout = ResponseLayout.build(np.sort(np.arange(n) % models), np.arange(n), models, n)
    features = rng.normal(size=(n, p))
    query_kernel = np.exp(-rng.random((n, n)))
    start = time.perf_counter()
    pairwise_sums(layout, features, query_kernel, "rbf", 1.0, DEFAULT_BLOCK_BYTES)
    return time.perf_counter() - start


def duration_text(seconds: float) -> str:
    """``"about 40 s"``, ``"about 3 min"``."""
    if seconds < 90:
        return f"about {max(1, round(seconds)):.0f} s"
    return f"about {seconds / 60:.0f} min"
