"""``python -m pkps_core ARGS`` run inside the test's own process.

The same :func:`pkps_core.cli.main` a process runs, with its standard output, standard error
and exit status handed back as a :class:`subprocess.CompletedProcess` — without starting a
Python and importing pandas, DuckDB and the importers again (about a second a command on the
2-core machine). For checks of what a command answers: a test that needs the process itself
(a file-size limit, a kill, a hang guard, what an interpreter prints at start-up) starts one.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from pkps_core import cli


def run_in_process(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run one command; ``env`` is added to the environment for its duration."""
    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:  # argparse's usage errors end the process with 2
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "pkps_core", *argv], code, out.getvalue(), err.getvalue()
    )
