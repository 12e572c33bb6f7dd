"""Starts the browser tests' ``streamlit run app.py`` servers by forking one process that
has imported their libraries once (the preload model of gunicorn and of
``multiprocessing``'s forkserver).

A fresh ``python -m streamlit run app.py`` spends about 2 s of CPU importing Streamlit,
pandas, scikit-learn, SciPy, Plotly, DuckDB and ``pkps_core`` before its first page; the
browser tests start about twenty servers per run. Here each pytest-xdist worker runs this
script once: it imports those libraries, then reads one request per line on stdin
(``{"args": [...], "env": {...}, "cwd": ..., "log": ...}``), forks, and answers the
child's pid on stdout. The child starts its own session (``setsid``: the tests stop a
server with ``killpg``), points stdout and stderr at the log, takes the request's
environment and folder, and runs Streamlit's command line (``streamlit.web.cli.main``,
what ``python -m streamlit`` runs). The app's own package (``perspective_app``) is not
imported here: its cached functions are made under the server's runtime, as in a fresh
server. Streamlit reads its configuration again at ``run`` (environment and flags of the
request). Children are reaped as they end (SIGCHLD), so a stopped server's pid goes away.

``tests/test_install.py`` and ``tests/test_app_entrypoints.py`` start the app as users
do, from a fresh process.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _preload() -> None:
    import duckdb  # noqa: F401
    import pandas  # noqa: F401
    import plotly.express  # noqa: F401
    import pyarrow  # noqa: F401
    import scipy.stats  # noqa: F401
    import sklearn.base  # noqa: F401
    import streamlit.web.cli  # noqa: F401

    import pkps_core.embed  # noqa: F401
    import pkps_core.predict  # noqa: F401
    import pkps_core.views  # noqa: F401


def _reap(*_) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve(request: dict) -> None:
    """In the forked child: become the server the request describes; never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]  # as `python -m streamlit` run from that folder
        sys.argv = ["streamlit", *request["args"]]
        from streamlit.web import cli

        cli.main(args=request["args"], prog_name="streamlit")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the log says what happened
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    _preload()
    signal.signal(signal.SIGCHLD, _reap)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _serve(request)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
