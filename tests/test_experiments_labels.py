"""AppTest and views: the Experiments page says what it ran.

Budgets above the data are dropped with a note, a setting with one value is not drawn as a
one-point line, the settings have readable names and help, the methods keep fixed
distinct colours, and the Wilcoxon table covers every budget.
"""

import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pkps_core import views
from pkps_core.predict import METHODS
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "perspective_app" / "app_pages" / "experiments.py")


@pytest.fixture()
def small_store(tmp_path, monkeypatch):
    """Four responses per cell."""
    records = make_synthetic(n_models=15, n_tasks=3, budget=4, random_state=5).records
    path = tmp_path / "small.duckdb"
    with Store(path) as store:
        store.ingest(records)
    monkeypatch.setenv("PKPS_STORE", str(path))
    return path


def _run(budgets, methods=("sample", "pkps")) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.run()
    at.multiselect(key="exp_query-efficiency_budget").set_value(list(budgets))
    at.multiselect(key="exp_query-efficiency_methods").set_value(list(methods))
    at.number_input(key="exp_seeds").set_value(2)
    at.button[0].click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _mae_figure(at: AppTest) -> dict:
    return json.loads(
        next(c for c in at.get("plotly_chart") if c.key == "exp_mae_chart").proto.spec
    )


def test_a_budget_above_the_data_is_dropped_and_said(small_store):
    at = _run([1, 4, 8])
    assert any("Budget 8 is above the largest cell" in i.value for i in at.info)
    summary = at.dataframe[0].value
    assert sorted(set(summary.index.get_level_values("budget"))) == [1, 4]
    tests = at.dataframe[-1].value
    assert set(tests["budget"]) == {1, 4}


def test_one_budget_is_a_bar_per_method_not_a_one_point_line(small_store):
    at = _run([2])
    figure = _mae_figure(at)
    assert {t["type"] for t in figure["data"]} == {"bar"}
    assert "Queries per cell (budget m) 2" in figure["layout"]["title"]["text"]


def test_settings_have_readable_labels_with_help(small_store):
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.run()
    budget = at.multiselect(key="exp_query-efficiency_budget")
    assert budget.label == "Queries per cell (budget m)"
    assert "responses each (model, task) cell keeps" in budget.help
    assert at.multiselect(key="exp_query-efficiency_p_task").label == "Share of cells observed"


def test_method_colours_are_fixed_and_distinct(small_store):
    at = _run([1, 4], methods=("sample", "dkps", "pkps", "ensemble"))
    colours = {t["name"]: t["line"]["color"] for t in _mae_figure(at)["data"]}
    assert colours == {m: views.METHOD_COLOURS[m] for m in colours}
    assert set(views.METHOD_COLOURS) == set(METHODS)
    assert len(set(views.METHOD_COLOURS.values())) == len(METHODS)


def test_budget_check_notes_short_cells():
    cells = pd.DataFrame({"n_responses": [2, 4, 4, 4]})
    kept, notes = views.budget_check(cells, [1, 4, 8, 16])
    assert kept == [1, 4]
    assert "Budget 8, 16 is above the largest cell" in notes[0] and "they were" in notes[0]
    assert notes[1] == (
        "At budget 4, 25% of the cells have fewer than 4 responses and keep all of theirs."
    )
