"""pytest's rootdir conftest: the quick/slow ordering of the test files.

The library (``pkps_core``) and the app (``perspective_app``) come from the installed package
(``make test``: ``pip install -e .``); pytest also puts this folder on ``sys.path`` (the
folder of a rootdir ``conftest.py``, its default ``prepend`` import mode), as ``streamlit run
app.py`` does, so a checkout's tests find both without an install too.
"""

import fcntl
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

# pytest-xdist's workers share the machine's cores: each worker's BLAS (and the app servers
# and CLI processes it starts) gets its share of them, not every core. Two workers each
# running two BLAS threads on two cores wait on each other's spinning threads.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _SHARE = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _SHARE)

# The app compiles UMAP in a background thread at start
# (perspective_app.shared.start_umap_warmup); in the test processes that is ~25 s of CPU no
# test needs (the tests that use UMAP pay it).
os.environ.setdefault("PKPS_UMAP_WARMUP", "0")
# The one test that runs UMAP (tests/test_views.py) spends its time in numba compiling
# umap-learn's functions (its compile cache is empty in a fresh venv), not in running them
# on its 14 points; at LLVM's level 0 they compile faster (alone 34 -> 25 s; in fresh CI-like
# runs 51.6 s before, 44.5 s after). The app itself compiles at numba's default level.
os.environ.setdefault("NUMBA_OPT", "0")

# The tests run the library as the project's programs do (the `pkps` command and the app
# call this at their start): glibc's malloc keeps freed memory for the next temporary
# (pkps_core.space.runtime.keep_freed_memory; bench/malloc_pad.py).
from pkps_core.space.runtime import keep_freed_memory  # noqa: E402

keep_freed_memory()


def _wait_for_the_script_thread() -> None:
    """AppTest's wait for a script run (``streamlit.testing.v1.local_script_runner.
    require_widgets_deltas``) wakes every millisecond and scans every event of the run
    (one per element sent) for the runner's SHUTDOWN, which it emits as its script thread
    ends, taking the GIL from the script each time. Here the wait joins that thread with
    the same timeout, then checks the same event and fails as upstream does (its error,
    the runner stopped). AppTest-heavy files ran 1–10 % faster in A/B pairs
    (docs/development.md). Left as it is where the runner's internals differ."""
    try:
        from streamlit.testing.v1 import local_script_runner as runner_module
    except ImportError:  # no Streamlit: the tests that need it skip
        return
    runner_class = runner_module.LocalScriptRunner
    upstream = getattr(runner_module, "require_widgets_deltas", None)
    if upstream is None or not hasattr(runner_class, "script_stopped"):
        return

    def wait(runner, timeout: float = 3) -> None:
        thread = getattr(runner, "_script_thread", None)
        if not isinstance(thread, threading.Thread):
            upstream(runner, timeout)
            return
        thread.join(timeout)
        if runner.script_stopped():
            return
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")

    runner_module.require_widgets_deltas = wait


_wait_for_the_script_thread()


_UMAP_WARMUP: list = []


def pytest_sessionstart(session):
    """In a fresh venv, pynndescent (UMAP's neighbour search) compiles its numba functions
    at ``import umap`` and keeps those numba can cache in its ``__pycache__`` (about 4.5 s
    of the 15.9 s of CPU of a first import; the functions that use dynamic globals are
    compiled at every import) that the one test running UMAP (``tests/test_views.py``)
    would otherwise pay. The run's first process
    starts that import at the lowest CPU priority, so it runs in the cores' idle moments
    (the browser tests' waits) and the test finds the compiled code. Nothing when
    umap-learn is absent or its code is already compiled; stopped at the run's end."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import importlib.util
    import subprocess
    import sys

    spec = importlib.util.find_spec("pynndescent")
    if spec is None or spec.origin is None or importlib.util.find_spec("umap") is None:
        return
    if any((Path(spec.origin).parent / "__pycache__").glob("*.nbi")):
        return
    process = subprocess.Popen(
        [sys.executable, "-c", "import umap"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        os.setpriority(os.PRIO_PROCESS, process.pid, 19)
    except OSError:  # gone already, or not allowed: it runs at the usual priority
        pass
    _UMAP_WARMUP.append(process)


def pytest_sessionfinish(session, exitstatus):
    for process in _UMAP_WARMUP:
        if process.poll() is None:
            process.kill()
        process.wait()


def pytest_collection_modifyitems(config, items):
    """The files holding the most tests marked ``slow`` run first, each file's tests in their
    own order (a stable sort): pytest-xdist's ``--dist loadfile --no-loadscope-reorder``
    (the Makefile's; xdist's default reorders the files by their number of tests) hands the
    files out in this order, so the longest ones start at once and the short ones fill in
    at the end, instead of one long file started late keeping one worker busy while the
    other idles."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


# ---------------------------------------------------------------- stores the tests share

ALPACA = Path(__file__).resolve().parent.parent / "shared/data/alpaca_eval/alpaca_eval_40.parquet"


def _run_folder(tmp_path_factory) -> Path:
    """A folder of this test run that every pytest-xdist worker sees (a worker's base
    temporary folder sits in the run's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def alpaca_template(tmp_path_factory) -> Path:
    """The AlpacaEval-40 store with every text embedded (a first ``records()`` done),
    built once per test run under a file lock, whichever worker asks first; tests copy it
    (``shutil.copyfile``) and never open it. Skips where the shared data is absent."""
    if not ALPACA.exists():
        pytest.skip(f"the AlpacaEval cache is not at {ALPACA}")
    import pandas as pd

    from pkps_core.store import Store

    folder = _run_folder(tmp_path_factory) / "shared-stores"
    folder.mkdir(exist_ok=True)
    template = folder / "alpaca-embedded.duckdb"
    with open(folder / "alpaca.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not template.exists():
            building = folder / "alpaca-building.duckdb"
            building.unlink(missing_ok=True)
            with Store(building) as store:
                store.ingest(pd.read_parquet(ALPACA), source=ALPACA.name)
                store.records()
            os.replace(building, template)
    return template
