"""The LocalCluster the Dask tests run on (``test_dask_engine``, ``test_dask_inputs``)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

WORKER_MEMORY = 1 << 30


@contextmanager
def local_cluster(memory_limit: int = WORKER_MEMORY) -> Iterator[object]:
    """A client of a fresh LocalCluster: 2 worker processes × 1 thread, ``memory_limit``
    bytes each; the cluster is closed on exit."""
    import distributed

    with _bare_main():  # the worker processes start here
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=None,
        )
    with cluster, distributed.Client(cluster) as client:
        yield client


@contextmanager
def _bare_main() -> Iterator[None]:
    """``__main__`` without a file while worker processes are spawned: spawn runs the
    parent's main script again in each child, and after an AppTest in the same pytest
    process that script is the last page the test ran (a page script run in a worker
    fails, and the Nanny with it)."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
