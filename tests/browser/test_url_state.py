"""The store and page settings live in the URL: a reload shows the same view (the store, the
Perspective page's kernel, the Predictions page's settings, the New model page's model); a URL
whose store points outside the store folder is refused in one line and creates no file."""

from __future__ import annotations

import io
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import pytest
from app_utils import go_to, upload_and_import, wait_for_app
from playwright.sync_api import expect

from pkps_core.demo import ensure_demo_store
from pkps_core.store import Store

pytestmark = pytest.mark.browser


def small_cache() -> bytes:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "kappa", "omega", "sigma", "theta"]
    rows = [
        {
            "model": f"fam{m % 3}/model-{m}",
            "task": task,
            "query_id": f"q{q}",
            "query": f"{task} question {q} about {words[q]}",
            "response": " ".join(rng.choice(words, size=6)),
            "score": float(rng.integers(0, 2)),
        }
        for m in range(8)
        for task in ("math", "code")
        for q in range(6)
    ]
    return pd.DataFrame(rows).to_csv(index=False).encode()


def test_reload_keeps_store_and_settings_and_outside_stores_are_refused(
    tmp_path, start_server, new_session
):
    folder = tmp_path / "stores"
    folder.mkdir()
    demo = ensure_demo_store(folder / "demo.duckdb")
    server = start_server(demo, PKPS_DATA_DIR=str(folder))
    session = new_session().open(server)
    page = session.page
    go_to(session, "Data")
    upload_and_import(session, ("small.csv", small_cache()))
    assert (folder / "small-csv.duckdb").is_file()
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("small-csv.duckdb").first).to_be_visible()

    go_to(session, "Perspective space")
    page.get_by_test_id("stRadio").filter(has_text="Query kernel").get_by_text(
        "delta (= DKPS)"
    ).click()
    wait_for_app(page)
    assert "store=small-csv.duckdb" in page.url and "space_query_kernel=delta" in page.url
    session.assert_clean()

    # (a reload of a page's deep link makes Streamlit probe /<page>/_stcore/health: a 404
    # in the console that is Streamlit's, so the console is not checked after it)
    page.reload()
    wait_for_app(page)
    expect(sidebar.get_by_text("small-csv.duckdb").first).to_be_visible()
    checked = (
        page.get_by_test_id("stRadio").filter(has_text="Query kernel").locator("input:checked")
    )
    expect(checked).to_have_value("1")  # the second option, delta

    before = sorted(p.name for p in tmp_path.rglob("*"))
    for outside in ("../evil.duckdb", str(tmp_path / "evil.duckdb")):
        other = new_session()
        other.page.goto(f"{server.url}/?store={outside}")
        wait_for_app(other.page)
        alert = other.page.get_by_test_id("stSidebar").get_by_text(
            "The link's store was not opened."
        )
        expect(alert).to_be_visible()
        expect(
            other.page.get_by_test_id("stSidebar").get_by_text("demo (synthetic)")
        ).to_be_visible()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "evil.duckdb").exists()


def _query(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query, keep_blank_values=True)


@pytest.mark.slow
def test_reload_keeps_the_prediction_settings_and_the_new_models_choice(
    tmp_path, start_server, new_session
):
    folder = tmp_path / "stores"
    folder.mkdir()
    store = folder / "small.duckdb"
    with Store(store) as opened:
        opened.ingest(pd.read_csv(io.BytesIO(small_cache())))
    server = start_server(store, PKPS_DATA_DIR=str(folder))
    session = new_session().open(server)
    page = session.page

    go_to(session, "Predictions")
    targets = page.get_by_test_id("stMultiSelect").filter(has_text="Targets")
    targets.locator("input").click()
    targets.locator("input").fill("fam1/model-4")
    # the option, once the list shows it (Enter typed before then selected nothing when the
    # machine was busy)
    page.get_by_role("option", name="fam1/model-4", exact=True).click()
    page.keyboard.press("Escape")
    expect(targets).to_contain_text("fam1/model-4")
    budget = page.get_by_test_id("stNumberInput").filter(has_text="Target budget").locator("input")
    budget.fill("2")
    page.get_by_test_id("stFormSubmitButton").filter(has_text="Predict").locator("button").click()
    wait_for_app(page)
    query = _query(page)
    assert query["pred_targets"] == ["fam1/model-4"] and query["pred_budget"] == ["2"], query
    session.assert_clean()

    page.reload()
    wait_for_app(page)
    targets = page.get_by_test_id("stMultiSelect").filter(has_text="Targets")
    expect(targets).to_contain_text("fam1/model-4")
    budget = page.get_by_test_id("stNumberInput").filter(has_text="Target budget").locator("input")
    expect(budget).to_have_value("2")
    expect(page.get_by_text("saw at most 2 of them").first).to_be_visible()

    go_to(session, "New model")
    picker = page.get_by_test_id("stSelectbox").filter(has_text="Model in the store")
    picker.click()
    page.get_by_role("option", name="fam2/model-5").click()
    wait_for_app(page)
    assert _query(page)["new_model_pick"] == ["fam2/model-5"]
    page.reload()
    wait_for_app(page)
    picker = page.get_by_test_id("stSelectbox").filter(has_text="Model in the store")
    expect(picker.get_by_role("combobox")).to_have_value("fam2/model-5")
