"""The perspective space: the hot path of PKPS, in the order it runs.

``prepare`` (records → arrays, PCA) → ``kernels`` (query/response kernels, A and D) →
``sums`` (the kernel sums of Eq. 1: factorised and pairwise) → ``affinity`` (the engine
that picks exact / sparse / Nyström per bandwidth, with error bounds; ``increments`` for
updates) → ``estimator`` (:class:`PerspectiveSpace`: bandwidth CV and classical MDS).
``knn`` is the distance-weighted KNN on the coordinates; ``runtime`` holds the threads and
the BLAS limit.
"""

from pkps_core.space.affinity import AffinityEngine, SumsReport
from pkps_core.space.estimator import (
    BANDWIDTH_GRID,
    QUERY_KERNELS,
    PerspectiveSpace,
    classical_mds,
)
from pkps_core.space.kernels import (
    RESPONSE_KERNEL_CHOICES,
    RESPONSE_KERNEL_NOTE,
    RESPONSE_KERNELS,
    KernelSums,
    ResponseLayout,
)
from pkps_core.space.prepare import PreparedCache, prepare_cache, zhu_ghodsi_elbows

__all__ = [
    "BANDWIDTH_GRID",
    "QUERY_KERNELS",
    "RESPONSE_KERNELS",
    "RESPONSE_KERNEL_CHOICES",
    "RESPONSE_KERNEL_NOTE",
    "AffinityEngine",
    "KernelSums",
    "PerspectiveSpace",
    "PreparedCache",
    "ResponseLayout",
    "SumsReport",
    "classical_mds",
    "prepare_cache",
    "zhu_ghodsi_elbows",
]
