"""The app in a real browser on the demo store: every page, the scatters, the export,
an Experiments sweep. Each page is saved as a screenshot (``artifacts/screenshots``)."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from app_utils import (
    go_to,
    nav_titles,
    screenshot,
    scroll_to_top,
    wait_for_app,
    wait_for_charts,
    watch,
    watched,
)
from playwright.sync_api import expect

from pkps_core.demo import DEMO_SETTINGS
from pkps_core.predict import OUTPUT_COLUMNS

pytestmark = pytest.mark.browser

N_MODELS = DEMO_SETTINGS["n_models"]
N_TASKS = DEMO_SETTINGS["n_tasks"]
DOCUMENTED_COLUMNS = [
    "model",
    "task",
    "method",
    "prediction",
    "sample_score",
    "n_responses",
    "reference_score",
    "note",
]


def test_every_page_renders_without_errors(demo_server, new_session):
    session = new_session().open(demo_server)
    expect(session.main.get_by_test_id("stHeading").first).to_have_text("Perspective Explorer")
    expect(session.main.get_by_test_id("stMetricValue").first).to_have_text(str(N_MODELS))
    session.assert_clean()
    screenshot(session.page, "home")
    for title, name in [
        ("Data", "data"),
        # the docs' picture of this page is test_space_page's, at 1400×900
        ("Perspective space", "space-1280x800"),
        ("Predictions", "predictions"),
    ]:
        go_to(session, title)
        wait_for_charts(session.page, 2)
        session.assert_clean()
        # each docs picture shows what its row describes
        if name == "data":  # the store's overview, families and the coverage heatmap
            scroll_to_top(session.page, session.main.get_by_text("Store overview", exact=True))
        elif name == "predictions":
            # the predicted-vs-reference plot (every cell by three methods), not the
            # summary tables above it
            heading = session.main.get_by_test_id("stHeading").filter(
                has_text="Predicted vs reference"
            )
            scroll_to_top(session.page, heading)
            chart = session.page.locator(".st-key-pred_scatter .js-plotly-plot")
            assert chart.bounding_box()["y"] < 300, "the plot is not in the screenshot"
        screenshot(session.page, name)


MAPS = """() => {
    const gd = document.querySelector('.st-key-space_maps .js-plotly-plot');
    return gd && gd._fullData ? gd._fullData.filter(t => t.name !== 'selected').map(t => ({
        axis: t.xaxis, x: Array.from(t.x || []),
        models: (t.customdata || []).map(c => c[0]),
    })) : null;
}"""


def test_perspective_maps_and_bandwidth_slider(demo_server, new_session):
    session = new_session().open(demo_server)
    go_to(session, "Perspective space")
    page = session.page
    page.wait_for_function(f"() => ({MAPS})()?.length >= 2")
    for axis in ("x", "x2"):  # both maps draw every model
        models = {m for t in page.evaluate(MAPS) if t["axis"] == axis for m in t["models"]}
        assert len(models) == N_MODELS, axis
    caption = page.get_by_text("Query bandwidth σ =")
    cross_validated = caption.inner_text()

    # Switch cross-validation off: the slider (0.3 × median) takes over.
    page.get_by_test_id("stCheckbox").filter(has_text="Cross-validate").locator("label").click()
    wait_for_app(page)
    slider = page.get_by_test_id("stSlider").filter(has_text="Bandwidth").get_by_role("slider")
    assert slider.get_attribute("aria-valuetext") == "0.3 ×"
    before = page.evaluate(MAPS)[0]["x"]
    slider.focus()
    page.keyboard.press("ArrowRight")
    wait_for_app(page)
    assert slider.get_attribute("aria-valuetext") == "1 ×"
    assert "(1 × the median query distance" in caption.inner_text()
    assert caption.inner_text() != cross_validated
    page.wait_for_function(f"() => ({MAPS})()?.length >= 2")
    assert page.evaluate(MAPS)[0]["x"] != before, "the PKPS map did not re-render"
    session.assert_clean()


def test_predictions_export_has_one_row_per_cell_and_method(demo_server, new_session):
    session = new_session().open(demo_server)
    go_to(session, "Predictions")
    session.page.get_by_role("tab", name="Export").click()
    button = session.page.get_by_test_id("stDownloadButton").filter(has_text="Predictions (CSV)")
    with session.page.expect_download() as download_info:
        button.click()
    download = download_info.value
    assert download.suggested_filename == "predictions.csv"
    exported = pd.read_csv(download.path())
    # The documented columns first (docs/reference/outputs.md), then whatever
    # pkps_core.predict adds (intervals), then the target flag and the run's settings (the
    # export explains itself)
    assert list(exported.columns)[: len(DOCUMENTED_COLUMNS)] == DOCUMENTED_COLUMNS
    assert list(exported.columns)[: len(OUTPUT_COLUMNS)] == list(OUTPUT_COLUMNS)
    rest = list(exported.columns)[len(OUTPUT_COLUMNS) :]
    assert rest[0] == "target" and {"holdout", "bandwidth", "response_kernel"} <= set(rest)
    assert set(exported["method"]) == {"sample", "dkps", "pkps"}
    assert len(exported) == N_MODELS * N_TASKS * 3
    assert not exported.duplicated(["model", "task", "method"]).any()
    assert exported["model"].nunique() == N_MODELS
    assert exported.loc[exported["method"] == "pkps", "prediction"].notna().all()
    session.assert_clean()


@pytest.mark.slow
def test_experiments_sweep_runs_with_a_progress_bar(demo_server, new_session):
    session = new_session().open(demo_server)
    if "Experiments" not in nav_titles(session):
        pytest.skip("the Experiments page is not in app.py's navigation yet")
    go_to(session, "Experiments")
    page = session.page
    session.assert_clean()
    seeds = page.get_by_test_id("stNumberInput").filter(has_text="Seeds").locator("input")
    seeds.fill("2")
    watch(page, "[data-testid='stProgress']", "progress")
    page.get_by_test_id("stFormSubmitButton").filter(has_text="Run").locator("button").click()
    wait_for_app(page)
    session.main.get_by_test_id("stHeading").filter(has_text="MAE per method").wait_for()
    progress = watched(page, "progress")
    # per seed, with the time left from the pace so far (issue 38)
    assert any("Seed 1 of 2; about" in text and "left" in text for text in progress), progress
    assert any(text.startswith("Seed 2 of 2") for text in progress), progress
    # the chart is drawn after the heading arrives: wait for it rather than count at once
    page.get_by_test_id("stPlotlyChart").first.wait_for(state="visible", timeout=60_000)
    assert page.get_by_test_id("stPlotlyChart").count() >= 1
    session.assert_clean()
    scroll_to_top(page, session.main.get_by_test_id("stHeading").filter(has_text="MAE per method"))
    screenshot(page, "experiments")
    with page.expect_download() as download_info:
        page.get_by_test_id("stDownloadButton").filter(has_text="long results").click()
    long = pd.read_csv(io.BytesIO(open(download_info.value.path(), "rb").read()))
    assert set(long["seed"]) == {0, 1}
