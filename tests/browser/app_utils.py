"""Real-browser helpers, modelled on Streamlit's own ``e2e_playwright/conftest.py``.

A fixture starts ``streamlit run app.py`` on a free loopback port with its own temporary
store (``PKPS_STORE``), polls ``/_stcore/health`` and, per page, waits for the script to
finish (``[data-testid='stApp'][data-test-script-state='notRunning']``). Playwright drives
Debian's Chromium through ``executable_path`` (Playwright's own browser download is not
used): ``$PKPS_CHROMIUM``, else ``/usr/bin/chromium-headless-shell``, else
``/usr/bin/chromium``. The tests skip only when none of these exists; ``.ci/run``
installs ``chromium-headless-shell``.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "screenshots"
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
# Set PKPS_UPDATE_SCREENSHOTS=1 to also refresh the committed screenshots (the ones the
# README and docs/ show; the others stay in artifacts/).
UPDATE_DOCS = os.environ.get("PKPS_UPDATE_SCREENSHOTS", "") == "1"
README_SCREENSHOTS = {
    name
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for name in re.findall(r"screenshots/([\w-]+)\.png", page.read_text(encoding="utf-8"))
}
CHROMIUM_CANDIDATES = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 800}
STARTUP_TIMEOUT = 90.0
SCRIPT_TIMEOUT_MS = 240_000


def chromium_executable() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    override = os.environ.get("PKPS_CHROMIUM", "").strip()
    candidates = (override,) if override else CHROMIUM_CANDIDATES
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of a live process (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


# The servers are forked from a process that imported their libraries once
# (app_launcher.py: about 2 s of CPU less per server); PKPS_TEST_FORKED_SERVERS=0 starts
# each as a fresh `python -m streamlit run app.py` instead.
FORKED_SERVERS = os.environ.get("PKPS_TEST_FORKED_SERVERS", "1").strip() != "0"
_LAUNCHER_SCRIPT = Path(__file__).with_name("app_launcher.py")
_ENVIRONMENT = dict(os.environ)  # the launcher's own (BLAS threads are read at its start)


@dataclass
class ForkedServer:
    """A server forked by the launcher, with the part of ``subprocess.Popen`` the tests
    use (its parent, the launcher, reaps it: its pid goes away when it ends)."""

    pid: int
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "X"
            if state in ("Z", "X"):  # ended (a zombie until the launcher reaps it)
                self.returncode = -1  # the launcher has its status, not this process
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("streamlit", timeout)
            time.sleep(0.02)
        return self.returncode


class _Launcher:
    """This process's app_launcher.py, started on first use and closed at exit."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()
        atexit.register(self.close)

    def start(self, args: list[str], env: dict[str, str], log: Path) -> ForkedServer | None:
        """Fork a server; None when the launcher cannot (the caller starts one itself)."""
        with self.lock:
            try:
                if self.process is None or self.process.poll() is not None:
                    self.process = subprocess.Popen(
                        [sys.executable, str(_LAUNCHER_SCRIPT)],
                        cwd=ROOT,
                        env=_ENVIRONMENT | {"PYTHONUNBUFFERED": "1"},
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                request = {"args": args, "env": env, "cwd": str(ROOT), "log": str(log)}
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                reply = self.process.stdout.readline()
                return ForkedServer(int(json.loads(reply)["pid"])) if reply else None
            except (OSError, ValueError, KeyError):
                return None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


_LAUNCHER = _Launcher()


@dataclass
class AppServer:
    """One ``streamlit run app.py`` process on a loopback port, over one store file."""

    store: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | ForkedServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AppServer:
        self.port = free_port()
        env = os.environ | {"PKPS_STORE": str(self.store), "PYTHONUNBUFFERED": "1"} | self.env
        args = [
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(self.port),
            "--server.fileWatcherType",
            "none",
            "--browser.gatherUsageStats",
            "false",
        ]
        self.process = _LAUNCHER.start(args, env, self.log) if FORKED_SERVERS else None
        if self.process is None:
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "streamlit", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"streamlit not healthy after {STARTUP_TIMEOUT} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the server (no cleanup, as in a crash or an OOM kill)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.process.pid)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Session:
    """A browser tab with what it saw: console errors, page errors, dialogs."""

    page: object
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def open(self, server: AppServer, path: str = "") -> Session:
        self.page.goto(f"{server.url}/{path}")
        wait_for_app(self.page)
        return self

    @property
    def main(self):
        """The page's main area (the sidebar has headings of its own)."""
        return self.page.get_by_test_id("stMain")

    def assert_clean(self) -> None:
        """No Streamlit exception element, no console or page error, no dialog."""
        exceptions = self.page.get_by_test_id("stException")
        assert exceptions.count() == 0, exceptions.first.inner_text()
        assert not self.console_errors, self.console_errors
        assert not self.dialogs, self.dialogs


def wait_for_app(page, timeout: float = SCRIPT_TIMEOUT_MS) -> None:
    """Wait until the app is connected and its script run has finished (Streamlit's
    ``wait_for_app_run``, with its waits: 155 ms for the widgets' debounce before, 100 ms
    for the page to draw after)."""
    page.wait_for_timeout(155)
    page.wait_for_selector(
        "[data-testid='stApp'][data-test-connection-state='CONNECTED']", timeout=timeout
    )
    page.wait_for_selector(
        "[data-testid='stApp'][data-test-script-state='notRunning']", timeout=timeout
    )
    page.wait_for_timeout(100)


def screenshot(page, name: str) -> Path:
    """Save the viewport as ``artifacts/screenshots/<name>.png`` (git-ignored); with
    ``PKPS_UPDATE_SCREENSHOTS=1`` also as ``docs/screenshots/<name>.png`` when the README
    shows that file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(target))
    if UPDATE_DOCS and name in README_SCREENSHOTS:
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, DOCS_SCREENSHOTS / f"{name}.png")
    return target


def scroll_to_top(page, locator) -> None:
    """Scroll so ``locator`` is at the top of the viewport (what a README screenshot shows)."""
    # the margin keeps it clear of Streamlit's header, which overlays the page's top
    locator.first.evaluate(
        "e => { e.style.scrollMarginTop = '80px'; e.scrollIntoView({block: 'start'}); }"
    )
    page.wait_for_timeout(300)


# ---------------------------------------------------------------------- page helpers


def go_to(session: Session, title: str) -> None:
    """Open a page through the sidebar navigation, as a user does (a deep link would
    make Streamlit probe ``/<page>/_stcore/health`` first, a 404 in the console)."""
    link = session.page.get_by_test_id("stSidebarNavLink").filter(has_text=title)
    href = link.get_attribute("href")
    link.click()
    # the app keeps its store and settings in the query string: match the page's path
    session.page.wait_for_url(lambda url: url.split("?")[0] == href.split("?")[0])
    wait_for_app(session.page)
    session.main.get_by_test_id("stHeading").filter(has_text=title).first.wait_for()


def nav_titles(session: Session) -> list[str]:
    links = session.page.get_by_test_id("stSidebarNavLink").all()
    return [link.inner_text().split("\n")[-1].strip() for link in links]


def wait_for_charts(page, count: int) -> None:
    """Wait until ``count`` Plotly charts are drawn (they render after the script ends)."""
    page.wait_for_function(
        "n => document.querySelectorAll('.js-plotly-plot .plot-container').length >= n", arg=count
    )


def wait_for_scatters(page, n_points: int, count: int = 2) -> None:
    """Wait until ``count`` Plotly charts each draw ``n_points`` points in all (other
    charts on the page, e.g. a CV curve in an expander, may render first)."""
    page.wait_for_function(
        """([n, count]) => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(gd => gd.calcdata && gd.calcdata.reduce((s, c) => s + c.length, 0) === n)
            .length >= count""",
        arg=[n_points, count],
    )


def plotly_figures(page) -> list[dict]:
    """Every Plotly chart on the page, in page order: per trace its type, its number of
    drawn points (``calcdata``) and its x / y / customdata as plain lists."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
            traces: gd._fullData.map((t, i) => ({
                type: t.type,
                points: gd.calcdata[i].length,
                x: Array.from(t.x || []),
                y: Array.from(t.y || []),
                customdata: t.customdata ? Array.from(t.customdata) : [],
            })),
        }))"""
    )


def watch(page, selector: str, name: str) -> None:
    """Record, in ``window[name]``, the text of every element matching ``selector`` as it
    appears or changes (a progress bar may come and go between two polls)."""
    page.evaluate(
        """([selector, name]) => {
            window[name] = [];
            const seen = () => document.querySelectorAll(selector).forEach(el => {
                const text = el.innerText;
                const log = window[name];
                if (!log.length || log[log.length - 1] !== text) log.push(text);
            });
            new MutationObserver(seen).observe(document.body,
                {subtree: true, childList: true, characterData: true, attributes: true});
        }""",
        [selector, name],
    )


def watched(page, name: str) -> list[str]:
    return page.evaluate(f"window[{name!r}]")


def upload(session: Session, *files: tuple[str, bytes]) -> None:
    """Put files into the Data page's uploader and wait until they are listed.

    The bytes are written to files of their names and the uploader is given the paths,
    as a user picks files: Playwright hands a local browser a path as it is, but sends a
    buffer through its protocol (base64), which took 14 s for a 38 MB CSV against 0.5 s.
    The files stay until the test process ends (the browser reads them while uploading).
    """
    folder = Path(tempfile.mkdtemp(dir=_upload_root()))
    paths = []
    for name, data in files:
        path = folder / name
        path.write_bytes(data)
        paths.append(str(path))
    session.page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(paths)
    wait_for_uploaded(session.page, [name for name, _ in files])


def wait_for_uploaded(page, names: list[str], settle: bool = True) -> None:
    """Wait until the uploader lists every file (each has its "Remove" button once the
    server holds it), then (``settle``) until the script run the upload started has
    finished.

    Waiting for the run alone races on a loaded machine: the browser sends the files
    first and reruns the script after, so a wait begun 155 ms after the files were
    given can see the run before the upload still at rest, and return early."""
    from playwright.sync_api import expect

    for name in names:
        expect(page.get_by_role("button", name=f"Remove {name}")).to_be_visible(
            timeout=SCRIPT_TIMEOUT_MS
        )
    if settle:
        wait_for_app(page)


@functools.cache
def _upload_root() -> str:
    root = tempfile.mkdtemp(prefix="pkps-uploads-")
    atexit.register(shutil.rmtree, root, True)
    return root


def import_button(session: Session):
    return session.page.get_by_test_id("stButton").filter(has_text="Import").locator("button")


def upload_and_import(session: Session, *files: tuple[str, bytes]) -> None:
    upload(session, *files)
    import_button(session).click()
    wait_for_app(session.page)
    session.page.get_by_test_id("stAlertContentSuccess").or_(
        session.page.get_by_test_id("stAlertContentError")
    ).first.wait_for()
