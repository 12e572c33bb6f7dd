"""AppTest and views: the Perspective and Data pages say what they show.

PKPS and DKPS aligned on one figure with shared axes and one colour bar (overall score by
default, a task, family), the agreement sentence above the maps (no shared queries on the
demo; the paired limit on AlpacaEval-40), the disabled bandwidth slider shows the CV
choice, the δ limit on the CV curve, picked and searched models ringed in both maps, the
coordinates export holds the view shown.
"""

import base64
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from perspective_app.shared import background
from pkps_core import views
from pkps_core.views import comparison

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


def _array(value) -> np.ndarray:
    """A figure array, decoding Plotly's base64 typed arrays."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value, dtype=float)


def _space(store: Path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.SPACE_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _figure(at: AppTest, key: str) -> dict:
    return json.loads(next(c for c in at.get("plotly_chart") if c.key == key).proto.spec)


def _panels(figure: dict) -> dict[str, set[str]]:
    """Per subplot (x, x2) the models drawn there (rings left out)."""
    panels: dict[str, set[str]] = {}
    for trace in figure["data"]:
        if trace.get("name") != "selected" and trace.get("customdata"):
            panels.setdefault(trace.get("xaxis", "x"), set()).update(
                row[0] for row in trace["customdata"]
            )
    return panels


def test_the_sentence_above_the_maps_says_dkps_has_no_shared_queries(demo_store):
    at = _space(demo_store)
    warnings = [w.value for w in at.main.warning]
    assert any("cannot agree" in w and "ρ = 0 for every pair" in w for w in warnings), warnings
    assert "0 of 45 models (0%) keep their nearest neighbour" in warnings[0]


def test_the_disabled_slider_shows_the_cross_validated_bandwidth(demo_store):
    at = _space(demo_store)
    chosen = at.dataframe[0].value.query("chosen")["multiple_of_median"].iloc[0]
    shown = at.select_slider(key="space_bandwidth_shown")
    assert shown.disabled
    assert shown.value == pytest.approx(chosen)
    assert any(f"({chosen:.3g} × the median" in c.value for c in at.caption)


def test_both_maps_share_axes_and_one_colour_bar(demo_store):
    at = _space(demo_store)
    assert at.selectbox(key="space_colour_by").value == "overall score"
    figure = _figure(at, "space_maps")
    layout = figure["layout"]
    assert len(_panels(figure)) == 2 and all(len(p) == 45 for p in _panels(figure).values())
    assert layout["xaxis"]["title"]["text"] == "MDS axis 1 (PKPS frame, distance units)"
    assert layout["yaxis"]["title"]["text"] == "MDS axis 2 (PKPS frame, distance units)"
    assert layout["xaxis2"]["matches"] == "x" and layout["yaxis2"]["matches"] == "y"
    assert layout["coloraxis"]["showscale"]
    assert layout["coloraxis"]["colorbar"]["title"]["text"] == "overall score"
    assert not [t for t in figure["data"] if (t.get("marker") or {}).get("colorbar")]
    hover = figure["data"][0]["hovertemplate"]
    assert "%{x:.3f}" in hover and "%{customdata[2]:.3f}" in hover


def test_colour_by_a_task_family_and_the_overlay(demo_store):
    at = _space(demo_store)
    task_option = next(
        o for o in at.selectbox(key="space_colour_by").options if o.startswith("score in")
    )
    at.selectbox(key="space_colour_by").set_value(task_option).run()
    figure = _figure(at, "space_maps")
    assert figure["layout"]["coloraxis"]["colorbar"]["title"]["text"] == task_option
    # the demo covers 70 % of the cells: models without the task are drawn apart, in grey
    assert any(t["name"].startswith("no score in") for t in figure["data"])
    at.selectbox(key="space_colour_by").set_value("family").run()
    figure = _figure(at, "space_maps")
    assert not figure["layout"]["coloraxis"]["showscale"]
    at.radio(key="space_mode").set_value("overlay (DKPS → PKPS)").run()
    assert not at.exception
    figure = _figure(at, "space_maps")
    assert "xaxis2" not in figure["layout"]
    assert any(t.get("mode") == "lines" for t in figure["data"])


def test_the_cv_curve_shows_the_delta_limit_without_minor_ticks(demo_store):
    at = _space(demo_store)
    layout = _figure(at, "space_cv_curve")["layout"]
    assert any("δ limit" in a["text"] for a in layout.get("annotations", []))
    assert len(layout["shapes"]) == 1
    curve = at.dataframe[0].value.query("multiple_of_median > 0")  # 0 is the dashed line
    assert layout["xaxis"]["tickvals"] == pytest.approx(list(curve["multiple_of_median"]))


@pytest.mark.slow
def test_picked_and_searched_models_are_ringed_in_both_maps(demo_store):
    at = _space(demo_store)
    picked = at.multiselect(key="space_picked_models").options[:2]
    at.multiselect(key="space_picked_models").set_value(picked).run()
    rings = [t for t in _figure(at, "space_maps")["data"] if t.get("name") == "selected"]
    assert [t.get("xaxis", "x") for t in rings] == ["x", "x2"]
    for ring in rings:
        assert sorted(ring["text"]) == sorted(picked)
    at.multiselect(key="space_picked_models").set_value([]).run()
    at.text_input(key="space_search").input(picked[0].upper()).run()
    rings = [t for t in _figure(at, "space_maps")["data"] if t.get("name") == "selected"]
    assert [sorted(r["text"]) for r in rings] == [[picked[0]], [picked[0]]]
    assert at.dataframe[1].value["model"].eq(picked[0]).all()  # its neighbours are listed


def test_the_coordinates_export_holds_the_view_shown(demo_store):
    at = _space(demo_store)
    button = next(b for b in at.get("download_button") if "coordinates" in b.proto.label)
    assert button.proto.label == "Download these coordinates (CSV)"
    cells = shared.load_cells(str(demo_store), 1)
    metadata = comparison.model_metadata(cells)
    export = comparison.shown_coordinates(
        comparison.compare_spaces(
            *(shared.fit_space(str(demo_store), 1, k, "linear", "cv", 8) for k in ("rbf", "delta"))
        ),
        metadata,
    )
    figure = _figure(at, "space_maps")
    drawn = {
        (t.get("xaxis", "x"), row[0]): (x, y)
        for t in figure["data"]
        if t.get("name") != "selected" and t.get("customdata")
        for row, x, y in zip(t["customdata"], _array(t["x"]), _array(t["y"]), strict=True)
    }
    for row in export.itertuples():
        axis = "x" if row.space == "pkps" else "x2"
        assert drawn[(axis, row.model)] == pytest.approx((row.x, row.y))
    assert export["overall_score"].notna().all() and export["responses"].gt(0).all()


@pytest.fixture(scope="module")
def alpaca_store(alpaca_template, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alpaca-space") / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, path)  # the run's AlpacaEval store, embedded once
    return path


@pytest.mark.slow
def test_alpaca_eval_maps_agree_in_the_paired_limit(alpaca_store, monkeypatch):
    monkeypatch.setenv(shared.STORE_ENV, str(alpaca_store))
    at = _space(alpaca_store)
    sentence = next(i.value for i in at.main.info if "agree closely" in i.value)
    correlation = float(re.search(r"correlate at \*\*(\d\.\d+)\*\*", sentence).group(1))
    kept = int(re.search(r"(\d+) of 40 models", sentence).group(1))
    assert correlation >= 0.99 and kept >= 30 and "the paired limit" in sentence
    figure = _figure(at, "space_maps")
    assert [len(p) for p in _panels(figure).values()] == [40, 40]


def test_data_page_heatmaps_have_axis_titles_and_formatted_hovers(demo_store):
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.DATA_PAGE).run()
    assert not at.exception
    coverage = _figure(at, "data_coverage_chart")
    assert coverage["layout"]["xaxis"]["title"]["text"] == "task"
    assert coverage["layout"]["yaxis"]["title"]["text"] == "model"
    # colour: the share of the task's largest cell; the hover also gives the responses
    assert "responses %{customdata[2]:,.0f}" in coverage["data"][0]["hovertemplate"]
    assert "%{z:.3f}" in coverage["data"][0]["hovertemplate"]
    pairs = _figure(at, "data_pairedness_chart")
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
    monkeypatch.setattr(background, "_umap_warmup", {})
    monkeypatch.setattr(views, "umap_2d", lambda x: calls.append(threading.current_thread()))
    first = shared.start_umap_warmup()
    assert shared.start_umap_warmup() is first
    first.join(10)
    assert len(calls) == 1 and calls[0] is not threading.main_thread()
    monkeypatch.setenv(shared.UMAP_WARMUP_ENV, "0")
    monkeypatch.setattr(background, "_umap_warmup", {})
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
