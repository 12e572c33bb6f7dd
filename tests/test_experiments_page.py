"""AppTest: the Experiments page runs a small sweep end to end on its own store."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pkps_core.itemsim import make_item_cache
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "perspective_app" / "app_pages" / "experiments.py")


def _store(path, records, monkeypatch):
    with Store(path) as store:
        store.ingest(records)
    monkeypatch.setenv("PKPS_STORE", str(path))
    return path


@pytest.fixture()
def small_store(tmp_path, monkeypatch):
    records = make_synthetic(n_models=15, n_tasks=3, budget=4, random_state=5).records
    return _store(tmp_path / "small.duckdb", records, monkeypatch)


@pytest.fixture()
def dense_binary_store(tmp_path, monkeypatch):
    """Every model answers every item (0/1 scores): the splits' setting."""
    cache = make_item_cache(n_families=6, family_size=2, n_items=30, sparse_fraction=0.0)
    return _store(tmp_path / "dense.duckdb", cache.records, monkeypatch)


def test_query_efficiency_sweep_shows_chart_tests_and_export(small_store):
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception
    assert not at.get("plotly_chart")  # nothing runs before the user presses Run
    at.multiselect(key="exp_query-efficiency_budget").set_value([1, 4])
    at.multiselect(key="exp_query-efficiency_methods").set_value(["sample", "pkps", "ensemble"])
    at.number_input(key="exp_seeds").set_value(2)
    at.button[0].click()
    at.run()
    assert not at.exception
    charts = {chart.key for chart in at.get("plotly_chart")}
    assert {"exp_mae_chart", "exp_gain_chart"} <= charts
    summary = at.dataframe[0].value
    assert list(summary.index.get_level_values("budget")) == [1, 4]
    assert {"sample", "pkps", "ensemble"} <= set(summary.columns)
    tests = at.dataframe[-1].value
    assert set(tests["method"]) == {"pkps", "ensemble"}
    assert (tests["comparator"] == "sample").all()
    assert set(tests["budget"]) == {1, 4}  # every budget, not only the smallest
    assert at.get("download_button")


def test_split_protocol_shows_similarity(dense_binary_store):
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    at.selectbox[0].set_value("extrapolation")
    at.run()
    at.multiselect(key="exp_extrapolation_core_set").set_value([10])
    at.multiselect(key="exp_extrapolation_methods").set_value(["sample", "pkps"])
    at.number_input(key="exp_seeds").set_value(2)
    at.button[0].click()
    at.run()
    assert not at.exception
    assert "exp_similarity_chart" in {chart.key for chart in at.get("plotly_chart")}
    correlations = at.dataframe[1].value
    assert set(correlations["method"]) == {"sample", "pkps"} and (correlations["n"] > 0).all()


def test_experiments_page_is_in_the_app_navigation(tmp_path, monkeypatch):
    monkeypatch.setenv("PKPS_STORE", str(tmp_path / "nav.duckdb"))
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not app.exception
    app.switch_page("perspective_app/app_pages/experiments.py").run()
    assert not app.exception
    assert any("Experiments" in t.value for t in app.title)
