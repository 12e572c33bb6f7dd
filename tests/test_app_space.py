"""AppTest and views: the Perspective and Data pages say what they show (issue 19).

DKPS without shared queries is called out, the disabled bandwidth slider shows the CV
choice, charts have titled axes, 3-decimal hovers, a colour bar naming the task and the
score, the δ limit on the CV curve, and the selection ringed in both panels.
"""

import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import app_shared as shared
from pkps_core import views
from pkps_core.demo import ensure_demo_store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture
def demo_store(tmp_path, monkeypatch) -> Path:
    path = ensure_demo_store(tmp_path / "demo.duckdb")
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    return path


def _space(store: Path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.SPACE_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _figure(at: AppTest, key: str) -> dict:
    return json.loads(next(c for c in at.get("plotly_chart") if c.key == key).proto.spec)


def test_dkps_without_shared_queries_says_so_on_its_panel(demo_store):
    at = _space(demo_store)
    warnings = [w.value for w in at.main.warning]
    assert any("DKPS has no shared queries to compare" in w for w in warnings), warnings


def test_the_disabled_slider_shows_the_cross_validated_bandwidth(demo_store):
    at = _space(demo_store)
    chosen = at.dataframe[0].value.query("chosen")["multiple_of_median"].iloc[0]
    shown = at.select_slider(key="bandwidth_shown")
    assert shown.disabled
    assert shown.value == pytest.approx(chosen)
    assert f"({chosen:.3g} × the median" in at.caption[0].value


def test_scatters_name_their_axes_colour_and_format_hovers(demo_store):
    at = _space(demo_store)
    task = at.selectbox(key="colour_task").value
    for key in ("pkps_scatter", "dkps_scatter"):
        figure = _figure(at, key)
        layout = figure["layout"]
        assert layout["xaxis"]["title"]["text"] == "MDS axis 1 (perspective-space distance)"
        assert layout["yaxis"]["title"]["text"] == "MDS axis 2 (perspective-space distance)"
        title = layout["coloraxis"]["colorbar"]["title"]["text"]
        assert task in title and ("sample score" in title or "reference score" in title)
        hover = figure["data"][0]["hovertemplate"]
        assert "%{x:.3f}" in hover and "%{customdata[2]:.3f}" in hover


def test_the_cv_curve_shows_the_delta_limit_without_minor_ticks(demo_store):
    at = _space(demo_store)
    layout = _figure(at, "cv_curve")["layout"]
    assert any("δ limit" in a["text"] for a in layout.get("annotations", []))
    assert len(layout["shapes"]) == 1
    curve = at.dataframe[0].value.query("multiple_of_median > 0")  # 0 is the dashed line
    assert layout["xaxis"]["tickvals"] == pytest.approx(list(curve["multiple_of_median"]))


def test_picked_models_are_ringed_in_both_panels(demo_store):
    at = _space(demo_store)
    picked = at.multiselect(key="picked_models").options[:2]
    at.multiselect(key="picked_models").set_value(picked).run()
    for key in ("pkps_scatter", "dkps_scatter"):
        traces = {t.get("name"): t for t in _figure(at, key)["data"]}
        assert "selected" in traces, list(traces)
        assert sorted(traces["selected"]["text"]) == sorted(picked)


def test_data_page_heatmaps_have_axis_titles_and_formatted_hovers(demo_store):
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.DATA_PAGE).run()
    assert not at.exception
    coverage = _figure(at, "coverage_chart")
    assert coverage["layout"]["xaxis"]["title"]["text"] == "task"
    assert coverage["layout"]["yaxis"]["title"]["text"] == "model"
    assert "%{z:,.0f}" in coverage["data"][0]["hovertemplate"]
    pairs = _figure(at, "pairedness_chart")
    assert pairs["layout"]["yaxis"]["title"]["text"] == "row model"
    assert "%{z:.3f}" in pairs["data"][0]["hovertemplate"]


# ---------------------------------------------------------------------- views


def test_dkps_pairing_note_by_share_of_unpaired_pairs():
    def pairs(rho):
        return pd.DataFrame(
            {"model_a": ["a", "a", "b", "b"], "model_b": ["a", "b", "a", "b"], "rho": rho}
        )

    assert "no shared queries" in views.dkps_pairing_note(pairs([1.0, 0.0, 0.0, 1.0]))
    assert views.dkps_pairing_note(pairs([1.0, 0.5, 0.5, 1.0])) is None


def test_colour_label_escapes_the_task_and_names_the_score():
    cells = pd.DataFrame(
        {"task": ["<b>t</b>", "u"], "reference_score": [np.nan, 0.5], "reference": [0.1, 0.5]}
    )
    assert views.colour_label(cells, "<b>t</b>") == "&lt;b&gt;t&lt;/b&gt;<br>sample score"
    assert views.colour_label(cells, "u") == "u<br>reference score"


def test_merge_selection_keeps_order_and_known_models():
    assert views.merge_selection(["b"], ["a", "b", "zz"], ["a", "b", "c"]) == ["b", "a"]


def test_umap_warmup_runs_once_in_the_background(monkeypatch):
    calls = []
    monkeypatch.setenv(shared.UMAP_WARMUP_ENV, "1")
    monkeypatch.setattr(shared, "_umap_warmup", {})
    monkeypatch.setattr(views, "umap_2d", lambda x: calls.append(threading.current_thread()))
    first = shared.start_umap_warmup()
    assert shared.start_umap_warmup() is first
    first.join(10)
    assert len(calls) == 1 and calls[0] is not threading.main_thread()
    monkeypatch.setenv(shared.UMAP_WARMUP_ENV, "0")
    monkeypatch.setattr(shared, "_umap_warmup", {})
    assert shared.start_umap_warmup() is None


def test_streamlit_config_hides_the_deploy_button():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    # "viewer" and "minimal" both drop the developer options, the Deploy button among them
    assert config["client"]["toolbarMode"] in ("viewer", "minimal")


def test_delta_limit_note_says_when_the_delta_limit_was_no_candidate():
    from pkps_core.space import PerspectiveSpace
    from pkps_core.synthetic import make_synthetic
    from pkps_core.views.space import summarize_space

    unpaired = make_synthetic(n_models=12, n_tasks=3, budget=3, rho=0.0, random_state=1)
    summary = summarize_space(PerspectiveSpace().fit(unpaired.records))
    assert summary.undefined_pairs_grid[0] == 12 * 11 // 2
    assert summary.delta_limit_note().startswith("not a candidate: 66 model pairs")
    paired = make_synthetic(n_models=12, n_tasks=3, budget=3, rho=1.0, random_state=1)
    summary = summarize_space(PerspectiveSpace().fit(paired.records))
    assert summary.undefined_pairs_grid[0] == 0
    assert summary.delta_limit_note() == ""
