"""Fixtures of the browser tests (helpers in ``app_utils``, as in Streamlit's own
``e2e_playwright/shared/app_utils.py``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from app_utils import (
    CHROMIUM_ARGS,
    SCRIPT_TIMEOUT_MS,
    VIEWPORT,
    AppServer,
    Session,
    chromium_executable,
)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    executable = chromium_executable()
    if executable is None:
        pytest.skip(
            "no Chromium to drive: install Debian's chromium-headless-shell (apt-get install "
            "chromium-headless-shell; .ci/run does) or set PKPS_CHROMIUM to a Chromium binary"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def new_session(browser) -> Iterator[Callable[[], Session]]:
    """Factory of fresh browser contexts (separate cookies, so separate app sessions)."""
    contexts = []

    def make() -> Session:
        # reduced motion: Streamlit and Plotly skip their transitions (the renderer's CPU
        # time of tests/browser/test_pages.py 24.8 -> 21.2 s, docs/development.md)
        context = browser.new_context(
            viewport=VIEWPORT, accept_downloads=True, reduced_motion="reduce"
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(SCRIPT_TIMEOUT_MS)
        session = Session(page)
        page.on(
            "console",
            lambda msg: session.console_errors.append(msg.text) if msg.type == "error" else None,
        )
        page.on("pageerror", lambda exc: session.console_errors.append(f"page error: {exc}"))

        def on_dialog(dialog) -> None:
            session.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        page.on("dialog", on_dialog)
        return session

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def start_server(tmp_path) -> Iterator[Callable[..., AppServer]]:
    """Factory: ``start_server(store, **env)`` runs the app over ``store``; every server
    it started is stopped at teardown (SIGTERM, then SIGKILL)."""
    servers: list[AppServer] = []

    def start(store: Path, **env: str) -> AppServer:
        server = AppServer(store, tmp_path / f"streamlit-{len(servers)}.log", env)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """The demo store, built once into a temporary file (never ``data/demo.duckdb``) and
    never served: tests copy it."""
    from pkps_core.demo import ensure_demo_store

    return ensure_demo_store(tmp_path_factory.mktemp("demo-template") / "demo.duckdb")


@pytest.fixture(scope="session")
def demo_store_file(demo_template, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    shutil.copyfile(demo_template, target)
    return target


@pytest.fixture
def demo_copy(demo_template, tmp_path) -> Path:
    """A private copy of the demo store for a test that writes to it."""
    target = tmp_path / "store.duckdb"
    shutil.copyfile(demo_template, target)
    return target


@pytest.fixture(scope="session")
def demo_server(demo_store_file, tmp_path_factory, browser) -> Iterator[AppServer]:
    """One app over the demo store, shared by the read-only page flows."""
    log = tmp_path_factory.mktemp("demo-server") / "streamlit.log"
    server = AppServer(demo_store_file, log).start()
    yield server
    server.stop()
