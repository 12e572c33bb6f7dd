"""The New model report's exports (issue 18): a self-contained HTML (it must show its
figures offline, so no script is loaded from the internet), and PNGs of its figures drawn
by kaleido in a local Chromium — from the page and from ``report --out x.png`` — or one
line saying why not where there is no browser."""

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_in_process
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core import report as reports
from pkps_core.demo import DATA_DIR_ENV, ensure_demo_store
from pkps_core.store import Store
from pkps_core.views.new_model import new_model_report

ROOT = Path(__file__).resolve().parents[1]
PAGE = "perspective_app/app_pages/new_model.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//", re.IGNORECASE)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    return width, height


def _can_draw_png() -> bool:
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return reports.png_browser() is not None


needs_png = pytest.mark.skipif(not _can_draw_png(), reason="no kaleido or no Chrome/Chromium here")


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("export")
    return ensure_demo_store(folder / "demo.duckdb"), folder


@pytest.fixture(scope="module")
def report(demo_store):
    with Store(demo_store[0], read_only=True) as store:
        records = store.records()
    return new_model_report(records, sorted(records["model"].unique())[3])


def test_the_html_report_loads_no_script_from_the_internet(report):
    page = reports.report_html(report)
    assert not EXTERNAL_SCRIPT.search(page)
    assert page.count("Plotly.newPlot") == 2
    # plotly.js itself is inside, once
    assert page.count("plotly.js v") >= 1 and len(page) > 3_000_000


def test_the_html_report_is_the_same_bytes_each_time(report):
    # the page's download button serves these bytes under a name made from them: bytes that
    # changed on every rerun (plotly's random div ids) moved the file while the browser was
    # fetching it, and a download was cancelled
    assert reports.report_html(report, store="demo") == reports.report_html(report, store="demo")


@needs_png
def test_report_pngs_are_pngs_of_the_figures_size(report):
    pngs = reports.report_pngs(report, store="demo.duckdb")
    assert set(pngs) == {"tasks", "map"}
    assert reports.PNG_WIDTH >= 1600
    for name in ("tasks", "map"):
        assert _png_size(pngs[name]) == (reports.PNG_WIDTH, reports.PNG_HEIGHTS[name])
    assert all(len(data) > 10_000 for data in pngs.values())  # drawn, not blank


def test_without_a_browser_the_png_export_says_so_in_one_line(report, monkeypatch, tmp_path):
    monkeypatch.setattr(reports, "png_browser", lambda: None)
    with pytest.raises(reports.PngUnavailable) as raised:
        reports.report_pngs(report)
    message = str(raised.value)
    assert "\n" not in message and ("Chromium" in message or "kaleido" in message)


def _run_report(*args, env=None):
    """``report`` asked in this process (tests/cli_in_process.py); in a process of its own
    where ``env`` is given (an environment read when the PNG library loads)."""
    if env is None:
        return run_in_process("report", *args)
    return subprocess.run(
        [sys.executable, "-m", "pkps_core", "report", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.slow
@needs_png
def test_report_cli_writes_both_pngs(demo_store, tmp_path):
    model = "fam00/model-00"
    out = tmp_path / "figures" / "report.png"
    done = _run_report("--db", str(demo_store[0]), "--model", model, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote the figures of {model} to {out} (per task)")
    for path in (out, out.with_name("report-map.png")):
        width, height = _png_size(path.read_bytes())
        assert width == reports.PNG_WIDTH >= 1600 and height > 300


@pytest.mark.slow
def test_report_cli_without_a_browser_fails_in_one_line(demo_store, tmp_path):
    import os

    env = os.environ | {"BROWSER_PATH": str(tmp_path / "no-such-chromium")}
    out = tmp_path / "report.png"
    done = _run_report(
        "--db", str(demo_store[0]), "--model", "fam00/model-00", "--out", str(out), env=env
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("no PNG written:")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


@pytest.mark.slow
@needs_png
def test_new_model_page_offers_the_pngs(demo_store, monkeypatch, recorded_downloads):
    path, folder = demo_store
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    monkeypatch.setenv(DATA_DIR_ENV, str(folder))
    files = recorded_downloads
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    at.switch_page(PAGE).run()
    assert not [b for b in at.get("download_button") if "PNG" in b.proto.label]
    at.button(key="new_model_make_png").click().run()
    assert not at.exception, [e.message for e in at.exception]
    labels = {b.proto.label for b in at.get("download_button")}
    assert {"Per-task figure (PNG)", "PKPS map (PNG)"} <= labels
    for name in ("new_model_tasks.png", "new_model_map.png"):
        width, height = _png_size(files[name])
        assert width == reports.PNG_WIDTH and height > 300
    assert EXTERNAL_SCRIPT.search(files["new_model_report.html"].decode()) is None


@needs_png
def test_pngs_are_drawn_where_an_event_loop_already_runs(report):
    """Inside a running event loop (a caller's asyncio code; Playwright's sync API in the
    same process) kaleido's own loop must still start: it runs in a thread of its own."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def inside_a_loop():
        return reports.report_pngs(report)

    # the loop in a thread of the test's own: this thread may already run Playwright's
    with ThreadPoolExecutor(1) as thread:
        pngs = thread.submit(lambda: asyncio.run(inside_a_loop())).result()
    assert all(data[:8] == b"\x89PNG\r\n\x1a\n" for data in pngs.values())


def test_a_thread_that_does_not_answer_is_given_up_not_waited_for():
    import time

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        reports._in_a_thread(lambda: time.sleep(30), 0.2)
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="bad"):
        reports._in_a_thread(lambda: (_ for _ in ()).throw(ValueError("bad")), 5)
    assert reports._in_a_thread(lambda: 42, 5) == 42


def test_a_browser_that_stalls_is_started_again_then_named_in_one_line(monkeypatch):
    # a Chromium start that stalls under load hung `report --out x.png` for 600 s in one
    # CI-like run; now each try is bounded, and a second try draws
    pytest.importorskip("kaleido")
    monkeypatch.setattr(reports, "png_browser", lambda: "/usr/bin/chromium")
    tries = []

    def stalls_once(work, timeout):
        tries.append(timeout)
        if len(tries) == 1:
            raise TimeoutError
        return [b"drawn"]

    monkeypatch.setattr(reports, "_in_a_thread", stalls_once)
    assert reports.figures_png([object()]) == [b"drawn"]
    assert tries == [reports.PNG_TIMEOUT] * 2

    def always_stalls(work, timeout):
        raise TimeoutError

    monkeypatch.setattr(reports, "_in_a_thread", always_stalls)
    with pytest.raises(reports.PngUnavailable) as raised:
        reports.figures_png([object()])
    message = str(raised.value)
    assert "\n" not in message and "no answer" in message and "HTML export" in message


def test_a_download_of_an_unknown_file_kind_is_refused_before_streamlit_sees_it():
    from perspective_app import shared

    with pytest.raises(ValueError, match=r"'board\.xlsx'.*MEDIA_TYPES"):
        shared.download_button("Excel", b"", "board.xlsx")
    assert set(shared.widgets.MEDIA_TYPES) == {".csv", ".parquet", ".html", ".png"}
