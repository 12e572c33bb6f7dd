"""The perspective space: the hot path of PKPS, in the order it runs.

Reading order: ``definition`` (Eq. (1) as written, by loops: what every fast path must
equal) → ``kernels`` → ``sums`` and ``pairwise`` → ``affinity``. The order it runs:
``prepare`` (records → arrays, PCA) → ``kernels`` (query/response kernels, A and D) →
``sums`` (the kernel sums of Eq. 1: factorised and pairwise) → ``affinity`` (the engine
that picks exact / sparse / Nyström per bandwidth, with error bounds; ``increments`` for
updates) → ``estimator`` (:class:`PerspectiveSpace`: bandwidth CV and classical MDS).
``knn`` is the distance-weighted KNN on the coordinates; ``runtime`` holds the threads and
the BLAS limit.

The names below are imported on first use: a light submodule (``kernels``' choices, which
the CLI's parser reads) does not load scikit-learn.
"""

from pkps_core.lazy import lazy_attributes

_LAZY = {
    "AffinityEngine": "pkps_core.space.affinity",
    "SumsReport": "pkps_core.space.affinity",
    "BANDWIDTH_GRID": "pkps_core.space.kernels",
    "QUERY_KERNELS": "pkps_core.space.kernels",
    "PerspectiveSpace": "pkps_core.space.estimator",
    "classical_mds": "pkps_core.space.mds",
    "RESPONSE_KERNEL_CHOICES": "pkps_core.space.kernels",
    "RESPONSE_KERNEL_NOTE": "pkps_core.space.kernels",
    "RESPONSE_KERNELS": "pkps_core.space.kernels",
    "KernelSums": "pkps_core.space.kernels",
    "ResponseLayout": "pkps_core.space.kernels",
    "PreparedCache": "pkps_core.space.prepare",
    "prepare_cache": "pkps_core.space.prepare",
    "zhu_ghodsi_elbows": "pkps_core.space.prepare",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
