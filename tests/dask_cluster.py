"""The LocalCluster the Dask tests run on (``test_dask_engine``, ``test_dask_inputs``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

WORKER_MEMORY = 1 << 30


@contextmanager
def local_cluster(memory_limit: int = WORKER_MEMORY) -> Iterator[object]:
    """A client of a fresh LocalCluster: 2 worker processes × 1 thread, ``memory_limit``
    bytes each; the cluster is closed on exit."""
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
