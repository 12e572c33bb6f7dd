"""Every figure has axis titles and units, named colour bars and 3-decimal hovers (issues
18, 19): each page of the app is run on the demo store through the controls that switch
figures (coverage by family, intervals drawn for one model, the Experiments run with one
and with several budgets), every ``plotly_chart`` it sends is checked by
:func:`figure_rules.figure_problems`; the New model page draws the report's own figures
(``pkps_core.report``)."""

import json
from pathlib import Path

import plotly.graph_objects as go
import pytest
from figure_rules import figure_problems
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import DATA_DIR_ENV, ensure_demo_store

ROOT = Path(__file__).resolve().parents[1]
NEW_MODEL_PAGE = "perspective_app/app_pages/new_model.py"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("figures")
    path = folder / "demo.duckdb"
    ensure_demo_store(path)
    return path, folder


@pytest.fixture
def app(demo_store, monkeypatch):
    path, folder = demo_store
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    monkeypatch.setenv(DATA_DIR_ENV, str(folder))

    def open_page(page: str) -> AppTest:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
        at.switch_page(page).run()
        assert not at.exception, [e.message for e in at.exception]
        return at

    return open_page


def _figures(at: AppTest) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def _assert_readable(figures: dict[str, dict]) -> None:
    problems = [p for key, figure in figures.items() for p in figure_problems(figure, key)]
    assert not problems, "\n".join(problems)


def test_the_rules_catch_what_they_are_for():
    raw = go.Figure(go.Scatter(x=[0.1, 0.25], y=[1.5, 2.5], mode="markers"))
    raw.update_layout(xaxis_title="cv_error")
    problems = figure_problems(raw.to_plotly_json())
    assert any("raw column name" in p for p in problems)
    assert any("yaxis has no title" in p for p in problems)
    assert any("default hover" in p for p in problems)
    unitless = go.Figure(go.Scatter(x=[0.1, 0.2], y=[0.3, 0.4], hovertemplate="%{x} %{y:.2f}"))
    unitless.update_layout(xaxis_title="reference score", yaxis_title="predicted (0–1)")
    problems = figure_problems(unitless.to_plotly_json())
    assert any("no unit" in p for p in problems)
    assert any("%{x} shown as raw" in p for p in problems)
    assert any("%{y} shown as .2f" in p for p in problems)
    heat = go.Figure(go.Heatmap(z=[[1.5, 2.5]], x=["a", "b"], y=["m"], hovertemplate="%{z:.3f}"))
    heat.update_layout(xaxis_title="task", yaxis_title="model")
    assert figure_problems(heat.to_plotly_json()) == ["trace 'heatmap': colour bar without a title"]


def test_data_page_heatmaps(app):
    at = app(shared.DATA_PAGE)
    figures = _figures(at)
    at.radio(key="data_coverage_rows").set_value("families (share of models covered)").run()
    at.radio(key="data_pair_rows").set_value("families (mean ρ)").run()
    figures |= {f"{k} (families)": v for k, v in _figures(at).items()}
    assert len(figures) == 4
    _assert_readable(figures)


def test_space_page_scatters_and_cv_curve(app):
    at = app(shared.SPACE_PAGE)
    figures = _figures(at)
    at.selectbox(key="space_colour_by").set_value("family").run()
    at.radio(key="space_mode").set_value("overlay (DKPS → PKPS)").run()
    figures |= {f"{k} (family, overlay)": v for k, v in _figures(at).items()}
    assert {"space_maps", "space_cv_curve", "space_maps (family, overlay)"} <= set(figures)
    _assert_readable(figures)


def test_predictions_page_faceted_plot_and_bars(app):
    at = app(shared.PREDICTIONS_PAGE)
    at.selectbox(key="pred_highlight").set_value(at.selectbox(key="pred_highlight").options[1])
    at.run()
    figures = _figures(at)
    assert {"pred_scatter", "pred_task_bars"} <= set(figures)
    _assert_readable(figures)


@pytest.mark.slow
def test_experiments_page_charts(app):
    at = app(shared.EXPERIMENTS_PAGE)
    at.number_input(key="exp_seeds").set_value(1)
    at.multiselect(key="exp_query-efficiency_budget").set_value([1, 4])
    next(b for b in at.button if b.label.startswith("Run")).click().run()
    figures = _figures(at)
    at.multiselect(key="exp_query-efficiency_budget").set_value([2])
    next(b for b in at.button if b.label.startswith("Run")).click().run()
    assert not at.exception, [e.message for e in at.exception]
    figures |= {f"{k} (one budget)": v for k, v in _figures(at).items()}
    assert {"exp_mae_chart", "exp_gain_chart", "exp_mae_chart (one budget)"} <= set(figures)
    _assert_readable(figures)


@pytest.mark.slow
def test_new_model_page_figures_which_the_report_also_draws(app):
    at = app(NEW_MODEL_PAGE)
    figures = _figures(at)
    assert {"new_model_tasks", "new_model_scatter"} <= set(figures)
    _assert_readable(figures)
