"""The New model report's HTML in a real browser: a response's line breaks are drawn as
line breaks (a cell three lines tall), its markup shown as text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pkps_core.demo import demo_records
from pkps_core.store import Store

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


def test_a_response_with_line_breaks_renders_on_three_lines(browser, tmp_path):
    records = demo_records()
    records["response"] = records["response"] + "\nsecond <b>line</b>\nthird line"
    store = tmp_path / "lines.duckdb"
    with Store(store) as db:
        db.ingest(records, source="demo with line breaks")
    out = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "pkps_core", "report", "--db", str(store)]
        + ["--model", "fam00/model-00", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(out.as_uri())
        cell = page.locator("td").filter(has_text="third line").first
        assert cell.inner_text().splitlines()[-2:] == ["second <b>line</b>", "third line"]
        line_height = cell.evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 18")
        assert cell.bounding_box()["height"] >= 2.5 * line_height
        assert cell.locator("b").count() == 0  # the markup is text, not bold
    finally:
        context.close()
