"""In a real browser on the demo store: no Deploy button, DKPS without shared
queries said above the maps (the lasso selection ringed in both maps is in
test_space_page.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_utils import go_to
from playwright.sync_api import expect

from pkps_core.demo import DEMO_SETTINGS

pytestmark = pytest.mark.browser

N_MODELS = DEMO_SETTINGS["n_models"]


def test_no_deploy_button_and_dkps_says_it_has_no_shared_queries(demo_server, new_session):
    session = new_session().open(demo_server)
    expect(session.page.get_by_test_id("stToolbar")).to_have_count(1)
    expect(session.page.get_by_test_id("stAppDeployButton")).to_have_count(0)
    go_to(session, "Perspective space")
    expect(
        session.main.get_by_test_id("stAlert").filter(has_text="ρ = 0 for every pair")
    ).to_be_visible()
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
