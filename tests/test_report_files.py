"""The New model report's files read well outside the app: the HTML keeps a response's
line breaks (escaped text in a ``white-space: pre-wrap`` cell, never a literal ``\\n``), the
figures' axis titles have margins of their own, and ``report --out r.png`` on the
AlpacaEval-40 store writes PNGs at least 1600 px wide titled with the model and the store."""

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core import report as reports
from pkps_core.demo import demo_records
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
SECOND_LINE = "second line & <b>not bold</b>"


def _run_report(*args) -> subprocess.CompletedProcess:
    """``report`` asked in this process (tests/cli_in_process.py: the same cli.main)."""
    return run_in_process("report", *args)


@pytest.fixture(scope="module")
def multiline_store(tmp_path_factory) -> Path:
    """The demo cache with every response on three lines."""
    records = demo_records()
    records["response"] = records["response"] + "\n" + SECOND_LINE + "\n  indented third"
    path = tmp_path_factory.mktemp("multiline") / "multiline.duckdb"
    with Store(path) as store:
        store.ingest(records, source="demo with line breaks")
    return path


@pytest.mark.slow
def test_the_html_report_keeps_a_responses_line_breaks(multiline_store, tmp_path):
    out = tmp_path / "report.html"
    model = "fam00/model-00"
    done = _run_report("--db", str(multiline_store), "--model", model, "--out", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text(encoding="utf-8")
    escaped = SECOND_LINE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # the responses table: real line breaks around the escaped second line, in cells the
    # page's style wraps as written
    cells = re.findall(r"<td>([^<]*)</td>", page)
    multiline = [c for c in cells if escaped in c]
    assert multiline, "no response cell in the report"
    assert all(f"\n{escaped}\n  indented third" in c for c in multiline)
    assert "\\n" not in "".join(cells)
    assert "<b>not bold</b>" not in page
    assert re.search(r"td\{[^}]*white-space:pre-wrap", page)
    assert "<h1>New model report: fam00/model-00 · store multiline.duckdb</h1>" in page


def test_table_cells_are_escaped_numbers_rounded_and_gaps_blank():
    frame = pd.DataFrame({"text": ["a\nb <i>", None], "x": [0.123456, float("nan")]})
    table = reports._table_html(frame)
    assert "<td>a\nb &lt;i&gt;</td><td>0.1235</td>" in table
    assert "<tr><td></td><td></td></tr>" in table


@pytest.mark.slow
def test_png_figures_name_the_model_and_store_and_keep_titles_off_the_ticks(multiline_store):
    from pkps_core.views.new_model import new_model_report

    with Store(multiline_store, read_only=True) as store:
        records = store.records()
    report = new_model_report(records, "fam01/model-03")
    figures = reports.png_figures(report, store="<b>x</b>.duckdb")
    for name, figure in figures.items():
        title = figure.layout.title.text
        assert title.startswith("fam01/model-03 · store &lt;b&gt;x&lt;/b&gt;.duckdb"), title
        assert figure.layout.height == reports.PNG_HEIGHTS[name]
        assert figure.layout.xaxis.automargin and figure.layout.yaxis.automargin
    # the page's figures have the margins too
    assert reports.tasks_figure(report).layout.yaxis.automargin


def _png_width(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])[0]


@pytest.mark.slow
def test_report_png_on_the_alpaca_eval_store_is_at_least_1600_px_wide(alpaca_template, tmp_path):
    try:
        import kaleido  # noqa: F401
    except ImportError:
        pytest.skip("no kaleido here")
    if reports.png_browser() is None:
        pytest.skip("no Chrome/Chromium here")
    store = tmp_path / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, store)  # the run's AlpacaEval store, embedded once
    out = tmp_path / "r.png"
    done = _run_report("--db", str(store), "--model", "claude-2.1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    widths = [_png_width(p) for p in (out, out.with_name("r-map.png"))]
    print(f"AlpacaEval report PNG widths: {widths}")
    assert min(widths) >= 1600
