"""The ``pkps`` command: every ``python -m pkps_core`` command, plus ``pkps app``.

``pkps ingest|info|predict|evaluate|report|next|synth|…`` are :mod:`pkps_core.cli`'s own
parser and commands under the name ``pkps``; ``pkps app`` starts the Streamlit app of this
installed package (``streamlit run <package>/main.py``), on the embedded demo store unless
``--store`` (or ``$PKPS_STORE``) names another. The demo store is built before Streamlit
starts, on the first run, in the data folder (:func:`pkps_core.demo.data_dir`: the user data
folder, ``$XDG_DATA_HOME/perspective-explorer``, for an installed package).

This module imports neither Streamlit nor the app's pages: the other commands start as fast
as ``python -m pkps_core``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pkps_core.cli import build_parser as build_core_parser
from pkps_core.cli import main as core_main

PROG = "pkps"
MAIN_SCRIPT = Path(__file__).resolve().parent / "main.py"
STORE_ENV = "PKPS_STORE"  # read by perspective_app.shared.store (which imports Streamlit)
DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 8501
# The settings of the checkout's .streamlit/config.toml (which `streamlit run app.py` reads
# from the current folder, and an installed package does not have), given on the command
# line instead; tests/test_pkps_command.py checks the two agree.
STREAMLIT_OPTIONS = {
    "server.maxUploadSize": "256",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "viewer",
    # no "enter your email" question on the first start in a terminal
    "server.showEmailPrompt": "false",
}


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The parser's subcommands (the action ``add_subparsers`` returned)."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def build_parser() -> argparse.ArgumentParser:
    """``python -m pkps_core``'s parser named ``pkps``, with the ``app`` command."""
    parser = build_core_parser(prog=PROG)
    app = subcommands(parser).add_parser(
        "app",
        help="start the app: a Streamlit server on this machine",
        description="Start Perspective Explorer's app: a Streamlit server on ADDRESS:PORT "
        "over the embedded demo store, unless --store or $PKPS_STORE names another store. "
        "The demo store is built on the first run in the data folder: $PKPS_DATA_DIR if set, "
        "else data/ in a checkout, else $XDG_DATA_HOME/perspective-explorer "
        "(~/.local/share/perspective-explorer). Ctrl-C stops the server.",
    )
    app.add_argument(
        "--store",
        metavar="PATH",
        help="the .duckdb store to open (created empty if absent; default: $PKPS_STORE, "
        "else the demo store)",
    )
    app.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    app.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"interface to listen on (default {DEFAULT_ADDRESS}, this machine only; "
        "0.0.0.0 opens it to the network)",
    )
    app.add_argument("--headless", action="store_true", help="do not open a browser")
    app.set_defaults(run=cmd_app)
    return parser


def app_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The ``streamlit run`` command line and environment of ``pkps app``; builds the demo
    store first when no store is named (so the first page opens on it at once)."""
    env = dict(os.environ)
    if args.store:
        store = Path(args.store).expanduser().resolve()
        if store.is_dir():
            raise ValueError(f"--store names a folder, not a store file: {store}")
        if not store.parent.is_dir():
            raise ValueError(f"--store: the folder {store.parent} does not exist")
        from pkps_core.outputs import OutputError, check_writable

        try:  # the app keeps uploads, embeddings and fits in the store (DuckDB writes beside it)
            check_writable(store)
        except OutputError as exc:
            raise ValueError(
                f"--store: {exc} (the app writes its uploads, embeddings and fits to the store)"
            ) from None
        env[STORE_ENV] = str(store)
    elif not env.get(STORE_ENV, "").strip():
        from pkps_core.demo import demo_path, ensure_demo_store

        if not demo_path().is_file():
            print(f"building the demo store in {demo_path()} (first run)", flush=True)
        ensure_demo_store()
    command = [sys.executable, "-m", "streamlit", "run", str(MAIN_SCRIPT)]
    options = STREAMLIT_OPTIONS | {
        "server.address": args.address,
        "server.port": str(args.port),
        "server.headless": "true" if args.headless else "false",
    }
    for name, value in options.items():
        command += [f"--{name}", value]
    return command, env


def cmd_app(args: argparse.Namespace) -> int:
    command, env = app_command(args)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":  # the server takes this process's place (its pid, its signals)
        os.execve(sys.executable, command, env)
    return subprocess.call(command, env=env)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pkps`` console script."""
    return core_main(argv, parser=build_parser())


if __name__ == "__main__":
    sys.exit(main())
