"""Issue 19 in a real browser on the demo store: no Deploy button, DKPS without shared
queries said on its panel, and a lasso selection ringed in both Perspective panels."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_utils import go_to, screenshot, wait_for_app, wait_for_scatters
from playwright.sync_api import expect

from pkps_core.demo import DEMO_SETTINGS

pytestmark = pytest.mark.browser

N_MODELS = DEMO_SETTINGS["n_models"]

TRACE_NAMES = """key => {
    const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
    return gd ? gd._fullData.map(t => [t.name, gd.calcdata[t.index].length]) : null;
}"""


def test_no_deploy_button_and_dkps_says_it_has_no_shared_queries(demo_server, new_session):
    session = new_session().open(demo_server)
    expect(session.page.get_by_test_id("stToolbar")).to_have_count(1)
    expect(session.page.get_by_test_id("stAppDeployButton")).to_have_count(0)
    go_to(session, "Perspective space")
    wait_for_scatters(session.page, N_MODELS)
    expect(
        session.main.get_by_test_id("stAlert").filter(has_text="no shared queries")
    ).to_be_visible()
    session.assert_clean()


def test_a_lasso_selection_is_ringed_in_both_panels(demo_server, new_session):
    session = new_session().open(demo_server)
    page = session.page
    go_to(session, "Perspective space")
    wait_for_scatters(page, N_MODELS)
    area = page.locator(".st-key-pkps_scatter .nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    # a lasso around the left half of the PKPS panel
    corners = [(0.02, 0.02), (0.5, 0.02), (0.5, 0.98), (0.02, 0.98), (0.02, 0.03)]
    points = [(box["x"] + fx * box["width"], box["y"] + fy * box["height"]) for fx, fy in corners]
    page.mouse.move(*points[0])
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(x, y, steps=8)
    page.mouse.up()
    wait_for_app(page)
    page.wait_for_function(f"() => ({TRACE_NAMES})('dkps_scatter')?.some(t => t[0] === 'selected')")
    for key in ("pkps_scatter", "dkps_scatter"):
        names = dict(page.evaluate(TRACE_NAMES, key))
        assert 1 <= names["selected"] <= 5, names
    # the lasso's models moved into the picker (the ringed ones are its first five)
    expect(session.main.get_by_text("models selected; showing the first 5")).to_be_visible()
    picker = session.main.get_by_test_id("stMultiSelect").filter(has_text="pick models here")
    expect(picker).to_contain_text("fam")
    expect(session.main.get_by_text("Nearest neighbours", exact=True)).to_be_visible()
    screenshot(page, "space-selection")
    session.assert_clean()


def test_five_quick_clicks_on_a_download_give_five_files(demo_server, new_session):
    """Every download works every time: clicks in a row, without waiting for the page,
    each give the file (a click used to rerun the page and the next click was lost)."""
    session = new_session().open(demo_server)
    page = session.page
    go_to(session, "Predictions")
    page.get_by_role("tab", name="Export").click()
    button = page.get_by_test_id("stDownloadButton").filter(has_text="Model coordinates (CSV)")
    sizes = []
    for _ in range(5):
        with page.expect_download(timeout=20_000) as download:
            button.click()
        sizes.append(Path(download.value.path()).stat().st_size)
    assert len(sizes) == 5 and min(sizes) > 1000 and len(set(sizes)) == 1, sizes
    session.assert_clean()
