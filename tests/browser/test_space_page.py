"""The Perspective space page in a real browser at 1400×900: PKPS and DKPS aligned on one
figure with one colour bar, both maps above the fold under the agreement sentence, and a
selected (clicked or searched) model ringed in both maps — on the demo store (no shared
queries: the maps cannot agree) and on AlpacaEval-40 (fully paired: they coincide)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from app_utils import go_to, screenshot, wait_for_app
from playwright.sync_api import expect

from pkps_core.demo import DEMO_SETTINGS

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
FOLD = {"width": 1400, "height": 900}
CHART = ".st-key-space_maps .js-plotly-plot"

# per trace of the maps' figure: its name, its subplot (x / x2) and its points' names
TRACES = """() => {
    const gd = document.querySelector('.st-key-space_maps .js-plotly-plot');
    return gd && gd._fullData ? gd._fullData.map(t => ({
        name: t.name, axis: t.xaxis, points: gd.calcdata[t.index].length,
        models: (t.customdata || []).map(c => c[0]),
    })) : null;
}"""


def _open_space(session, server) -> None:
    session.page.set_viewport_size(FOLD)
    session.open(server)
    go_to(session, "Perspective space")
    session.page.wait_for_function(
        f"() => document.querySelectorAll('{CHART} .nsewdrag').length >= 2"
    )


def _ringed(page) -> dict[str, list[str]]:
    """The ringed models of each subplot."""
    rings = [t for t in page.evaluate(TRACES) if t["name"] == "selected"]
    return {t["axis"]: sorted(t["models"]) for t in rings}


def _assert_both_maps_above_the_fold(page) -> None:
    sentence = page.get_by_test_id("stAlert").first
    panels = page.locator(f"{CHART} .nsewdrag")
    assert panels.count() == 2
    top_of_maps = min(panels.nth(i).bounding_box()["y"] for i in range(2))
    assert sentence.bounding_box()["y"] < top_of_maps, "the sentence is not above the maps"
    for i in range(2):
        box = panels.nth(i).bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= FOLD["height"], box
        assert box["x"] + box["width"] <= FOLD["width"], box
    # one colour bar for both maps
    assert page.locator(f"{CHART} .colorbar").count() == 1


def _traces_cover_models(page, n_models: int) -> None:
    traces = page.evaluate(TRACES)
    for axis in ("x", "x2"):
        models = {
            m for t in traces if t["axis"] == axis and t["name"] != "selected" for m in t["models"]
        }
        assert len(models) == n_models, (axis, len(models))


def test_demo_maps_one_colour_bar_sentence_and_a_click_ringed_in_both(demo_server, new_session):
    session = new_session()
    _open_space(session, demo_server)
    page = session.page
    n_models = DEMO_SETTINGS["n_models"]
    _traces_cover_models(page, n_models)
    expect(page.get_by_test_id("stAlert").first).to_contain_text("cannot agree")
    expect(page.get_by_test_id("stAlert").first).to_contain_text("ρ = 0 for every pair")
    _assert_both_maps_above_the_fold(page)
    screenshot(page, "space")

    # a click on a point of the left map rings that model in both maps
    point = page.locator(f"{CHART} .subplot.xy .scatterlayer .trace .points path").first
    box = point.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    wait_for_app(page)
    page.wait_for_function(f"() => ({TRACES})()?.some(t => t.name === 'selected')", timeout=60_000)
    ringed = _ringed(page)
    assert set(ringed) == {"x", "x2"} and ringed["x"] == ringed["x2"] and len(ringed["x"]) == 1
    expect(page.get_by_text("Nearest neighbours", exact=True)).to_be_visible()
    session.assert_clean()


@pytest.fixture(scope="module")
def alpaca_store(alpaca_template, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alpaca-space") / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, path)  # the run's AlpacaEval store, embedded once
    return path


def test_alpaca_maps_agree_and_a_searched_model_is_ringed_in_both(
    alpaca_store, start_server, new_session
):
    server = start_server(alpaca_store, PKPS_DATA_DIR=str(alpaca_store.parent))
    session = new_session()
    _open_space(session, server)
    page = session.page
    _traces_cover_models(page, 40)
    sentence = page.get_by_test_id("stAlert").first
    expect(sentence).to_contain_text("agree closely")
    text = sentence.inner_text()
    correlation = float(re.search(r"correlate at (\d\.\d+)", text).group(1))
    kept, total = map(int, re.search(r"(\d+) of (\d+) models", text).groups())
    print(f"AlpacaEval-40: distance correlation {correlation}, nearest kept {kept}/{total}")
    assert correlation >= 0.99 and total == 40 and kept >= 30
    assert "paired limit" in text
    _assert_both_maps_above_the_fold(page)

    search = page.get_by_test_id("stTextInput").filter(has_text="Find a model").locator("input")
    search.fill("claude-2.1")
    search.press("Enter")
    wait_for_app(page)
    page.wait_for_function(f"() => ({TRACES})()?.some(t => t.name === 'selected')", timeout=60_000)
    # every name holding the text, in both maps
    both = ["claude-2.1", "claude-2.1_concise"]
    assert _ringed(page) == {"x": both, "x2": both}
    screenshot(page, "space-alpaca")
    session.assert_clean()


def test_a_lasso_selection_is_ringed_in_both_maps(demo_server, new_session):
    session = new_session()
    _open_space(session, demo_server)
    page = session.page
    chart = page.locator(CHART)
    chart.hover()
    chart.locator(".modebar-btn[data-title='Lasso Select']").click()
    area = page.locator(f"{CHART} .nsewdrag").first
    box = area.bounding_box()
    # a lasso around the left half of the PKPS map
    corners = [(0.02, 0.02), (0.5, 0.02), (0.5, 0.98), (0.02, 0.98), (0.02, 0.03)]
    points = [(box["x"] + fx * box["width"], box["y"] + fy * box["height"]) for fx, fy in corners]
    page.mouse.move(*points[0])
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(x, y, steps=8)
    page.mouse.up()
    wait_for_app(page)
    page.wait_for_function(f"() => ({TRACES})()?.some(t => t.name === 'selected')", timeout=60_000)
    ringed = _ringed(page)
    assert ringed["x"] == ringed["x2"] and 1 <= len(ringed["x"]) <= 5, ringed
    # the lasso's models moved into the picker (the ringed ones are its first five)
    expect(session.main.get_by_text("models selected; showing the first 5")).to_be_visible()
    picker = session.main.get_by_test_id("stMultiSelect").filter(has_text="pick models here")
    expect(picker).to_contain_text("fam")
    expect(session.main.get_by_text("Nearest neighbours", exact=True)).to_be_visible()
    screenshot(page, "space-selection")
    session.assert_clean()
