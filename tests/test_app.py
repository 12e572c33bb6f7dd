"""AppTest: every page renders, uploads validate and store, controls re-render, exports.

Each test points the app at its own temporary store through ``PKPS_STORE`` (the demo
store is built into a temporary file where a test needs it), so the tests never touch
``data/demo.duckdb`` and their caches (keyed by store path and version) never collide.
"""

import base64
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from alerts import detail, headline
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from perspective_app.shared.store import RUN_VERSION_KEY
from pkps_core.demo import DATA_DIR_ENV, DEMO_SETTINGS
from pkps_core.predict import OUTPUT_COLUMNS
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"
TIMEOUT = 300


def _app() -> AppTest:
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def _charts(at: AppTest) -> dict[str, str]:
    """Plotly charts on the page by key, as their figure JSON."""
    return {c.key: c.proto.spec for c in at.get("plotly_chart")}


def _figure(at: AppTest, key: str) -> dict:
    return json.loads(_charts(at)[key])


def _array(value) -> np.ndarray:
    """A figure array, decoding Plotly's base64 typed arrays."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return flat.reshape([int(n) for n in str(value.get("shape", len(flat))).split(",")])
    return np.asarray(value, dtype=object)


def _errors(at: AppTest) -> list[str]:
    return [e.message for e in at.exception]


def _store_state(path: Path) -> tuple[str, int, int]:
    with Store(path) as store:
        return store.content_hash(), store.version, store.summary()["models"]


@pytest.fixture
def empty_store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "empty.duckdb"
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    return path


def _small_cache() -> pd.DataFrame:
    """Six models in two families, two tasks, partly overlapping queries, with text."""
    rows = []
    topics = ["rivers", "planets", "poems", "prime numbers", "bread", "violins"]
    for m in range(6):
        family = "alpha" if m < 3 else "beta"
        for t, task in enumerate(["geo", "math"]):
            for q in range(3):
                qid = str((m + q) % 5)
                correct = (m + q + t) % 3 != 0
                rows.append(
                    {
                        "model": f"{family}/new-{m}",
                        "task": task,
                        "query_id": qid,
                        "query": f"Question {qid} of {task} about {topics[int(qid)]}",
                        "response": f"{family} answer {'right' if correct else 'wrong'} "
                        f"about {topics[int(qid)]} {m}",
                        "score": float(correct),
                    }
                )
    return pd.DataFrame(rows)


def _csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def _import_button(at: AppTest):
    return next(b for b in at.button if b.label == "Import")


def _upload_and_import(at: AppTest, *files: tuple[str, bytes, str]) -> AppTest:
    at.switch_page(shared.DATA_PAGE).run()
    at.file_uploader(key="data_upload").set_value(list(files)).run()
    _import_button(at).click().run()
    return at


# ---------------------------------------------------------------------- start and pages


def test_app_builds_and_starts_on_the_demo_store_by_default(tmp_path, monkeypatch):
    demo_path = tmp_path / "data" / "demo.duckdb"
    monkeypatch.delenv(shared.STORE_ENV, raising=False)
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_path.parent))
    at = _app().run()
    assert not _errors(at)
    assert at.title[0].value == "Perspective Explorer"
    assert demo_path.exists(), "the demo store is built on first run"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Models"] == str(DEMO_SETTINGS["n_models"])
    assert any(t.value == "demo (synthetic)" for t in at.sidebar.text)


def test_every_page_renders_on_the_demo_store(demo_store):
    at = _app().run()
    assert not _errors(at)

    at.switch_page(shared.DATA_PAGE).run()
    assert not _errors(at)
    assert [h.value for h in at.header] == ["Upload", "Store overview", "Coverage", "Pairedness"]
    charts = _charts(at)
    assert set(charts) == {"data_coverage_chart", "data_pairedness_chart"}
    # The demo covers 70 % of cells: the coverage heatmap draws the missing ones.
    values, missing = _figure(at, "data_coverage_chart")["data"]
    assert "missing" in missing["hovertemplate"]
    n_missing = int(np.isfinite(_array(missing["z"]).astype(float)).sum())
    n_cells = DEMO_SETTINGS["n_models"] * DEMO_SETTINGS["n_tasks"]
    assert 0.1 * n_cells < n_missing < 0.5 * n_cells
    assert np.isnan(_array(values["z"]).astype(float)).sum() == n_missing

    at.switch_page(shared.SPACE_PAGE).run()
    assert not _errors(at)
    assert _panel_titles(at) == ["PKPS", DKPS_TITLE]
    assert {"space_maps", "space_cv_curve"} == set(_charts(at))

    at.switch_page(shared.PREDICTIONS_PAGE).run()
    assert not _errors(at)
    mae = at.dataframe[0].value
    assert list(mae.index) == ["sample", "dkps", "pkps"]
    # The demo is unpaired (rho = 0): PKPS beats DKPS there.
    assert mae.loc["pkps", "MAE"] < mae.loc["dkps", "MAE"]


def test_empty_store_points_to_the_data_page(empty_store):
    at = _app()
    at.switch_page(shared.SPACE_PAGE).run()
    assert not _errors(at)
    assert any("holds no responses" in i.value for i in at.info)
    assert not _charts(at)


def test_a_page_reads_the_store_version_once_per_run_and_never_a_stale_one(
    empty_store, monkeypatch
):
    """The sidebar's version read is the page's for that run (one DuckDB open less per
    click); the next run reads it again, so a write from another process shows."""
    reads = []
    version = Store.version

    def counted(store):
        reads.append(store.path)
        return version.fget(store)

    monkeypatch.setattr(Store, "version", property(counted))
    at = _app()
    at.switch_page(shared.SPACE_PAGE).run()
    assert any("holds no responses" in i.value for i in at.info)
    assert reads == [str(empty_store)], "one version read per run, the sidebar's"

    with Store(empty_store) as other_process:
        other_process.ingest(_small_cache())
        written = version.fget(other_process)
    reads.clear()
    at.run()
    assert not _errors(at)
    assert not any("holds no responses" in i.value for i in at.info), "the new data shows"
    assert reads == [str(empty_store)]
    assert f"version {written}" in at.sidebar.caption[0].value
    # a page that never asks for it (Data) leaves no version behind for a later run
    at.switch_page(shared.DATA_PAGE).run()
    assert not _errors(at)
    assert RUN_VERSION_KEY not in at.session_state


def test_a_large_store_is_aggregated_by_family_or_paged(tmp_path, monkeypatch):
    path = tmp_path / "large.duckdb"
    cache = make_synthetic(n_models=90, n_tasks=3, budget=2, rho=0.5, random_state=1)
    with Store(path) as store:
        store.ingest(cache.records)
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    at = _app()
    at.switch_page(shared.DATA_PAGE).run()
    assert not _errors(at)
    assert at.radio(key="data_coverage_rows").value.startswith("families")
    families = _figure(at, "data_coverage_chart")["data"][0]["y"]
    assert families == sorted(cache.records["family"].unique())
    at.radio(key="data_coverage_rows").set_value("models").run()
    at.number_input(key="data_coverage_page").set_value(2).run()
    assert not _errors(at)
    # 90 models at 80 a page: page 2 shows the last 10 (family order = name order here).
    page_two = _figure(at, "data_coverage_chart")["data"][0]["y"]
    assert page_two == sorted(cache.records["model"].unique())[-10:]


# ---------------------------------------------------------------------- uploads


def test_uploading_a_small_csv_adds_its_models(empty_store):
    cache = _small_cache()
    at = _upload_and_import(_app().run(), ("small.csv", _csv(cache), "text/csv"))
    assert not _errors(at)
    assert not at.error, [e.value for e in at.error]
    assert headline(at.success[0]) == "Imported."
    assert f"{len(cache)} added" in detail(at.success[0])
    with Store(empty_store) as store:
        stored = set(store.coverage()["model"])
    assert stored == set(cache["model"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Models"] == "6"

    # The uploaded cache has text: the perspective page embeds and fits it.
    at.switch_page(shared.SPACE_PAGE).run()
    assert not _errors(at)
    assert _panel_titles(at) == ["PKPS", DKPS_TITLE]


def test_a_bad_csv_shows_the_rows_and_stores_nothing(demo_store):
    before = _store_state(demo_store)
    bad = _small_cache()
    bad.loc[4, ["model", "task", "query_id"]] = bad.loc[1, ["model", "task", "query_id"]]
    at = _upload_and_import(_app().run(), ("bad.csv", _csv(bad), "text/csv"))
    assert not _errors(at)
    assert len(at.error) == 1
    assert "nothing was stored" in at.error[0].value
    message = detail(at.error[0])
    assert "bad.csv" in message and "duplicate" in message and "rows 2, 5" in message
    assert _store_state(demo_store) == before


def test_one_bad_file_among_several_stores_none_of_them(empty_store):
    good = _small_cache()
    bad = _small_cache()
    bad["model"] = bad["model"].str.replace("alpha/", "gamma/").str.replace("beta/", "delta/")
    bad["score"] = bad["score"].astype(object)
    bad.loc[3, "score"] = "lots"
    at = _upload_and_import(
        _app().run(),
        ("good.csv", _csv(good), "text/csv"),
        ("bad.csv", _csv(bad), "text/csv"),
    )
    assert "nothing was stored" in at.error[0].value
    assert "bad.csv" in detail(at.error[0]) and "not numeric" in detail(at.error[0])
    assert _store_state(empty_store)[2] == 0


@pytest.mark.slow
@pytest.mark.skipif(not ALPACA.exists(), reason="shared AlpacaEval data not present")
def test_alpaca_eval_upload_shows_pkps_and_dkps(empty_store):
    at = _upload_and_import(
        _app().run(), (ALPACA.name, ALPACA.read_bytes(), "application/octet-stream")
    )
    assert not _errors(at)
    assert not at.error, [e.value for e in at.error]
    assert "32194 added" in detail(at.success[0])
    assert {m.label: m.value for m in at.metric}["Models"] == "40"
    models = pd.read_parquet(ALPACA, columns=["model"])["model"].unique()

    at.switch_page(shared.SPACE_PAGE).run()
    assert not _errors(at)
    assert _panel_titles(at) == ["PKPS", DKPS_TITLE]
    for panel in _panels(at).values():
        assert set(panel) == set(models)
    assert "kernel sums" in _bandwidth_caption(at)


# ---------------------------------------------------------------------- perspective space


DKPS_TITLE = "DKPS, aligned to the left map (Procrustes)"


def _bandwidth_caption(at: AppTest) -> str:
    return next(c.value for c in at.caption if c.value.startswith("Query bandwidth σ"))


def _panel_titles(at: AppTest) -> list[str]:
    return [a["text"] for a in _figure(at, "space_maps")["layout"]["annotations"]]


def _panels(at: AppTest) -> dict[str, dict[str, tuple[float, float]]]:
    """Per panel of the maps (x, x2): each model's drawn position (rings left out)."""
    panels: dict[str, dict[str, tuple[float, float]]] = {}
    for trace in _figure(at, "space_maps")["data"]:
        if trace.get("name") == "selected" or not trace.get("customdata"):
            continue
        xs, ys = _array(trace["x"]), _array(trace["y"])
        points = panels.setdefault(trace.get("xaxis", "x"), {})
        for row, x, y in zip(trace["customdata"], xs, ys, strict=True):
            points[row[0]] = (float(x), float(y))
    return panels


def _scatter_specs(at: AppTest) -> list[dict[str, tuple[float, float]]]:
    panels = _panels(at)
    return [panels["x"], panels["x2"]]


@pytest.mark.slow
def test_switching_kernels_and_bandwidth_rerenders(demo_store):
    at = _app()
    at.switch_page(shared.SPACE_PAGE).run()
    cv_caption = _bandwidth_caption(at)
    cv_specs = _scatter_specs(at)

    at.toggle(key="space_cv").set_value(False).run()
    at.select_slider(key="space_bandwidth").set_value(3.0).run()
    assert not _errors(at)
    assert "(3 × the median" in _bandwidth_caption(at)
    assert _bandwidth_caption(at) != cv_caption
    wide_specs = _scatter_specs(at)
    assert wide_specs[0] != cv_specs[0], "the PKPS scatter moves with the bandwidth"
    # DKPS does not depend on it, but it is drawn aligned to PKPS: it follows the left map
    assert wide_specs[1] != cv_specs[1]

    at.selectbox(key="space_response_kernel").set_value("rbf").run()
    assert not _errors(at)

    at.radio(key="space_query_kernel").set_value("delta").run()
    assert not _errors(at)
    assert _panel_titles(at)[0] == "Delta query kernel (same as DKPS)"
    left, right = _scatter_specs(at)
    assert left.keys() == right.keys()
    for model, position in left.items():  # the same map, aligned onto itself
        assert position == pytest.approx(right[model], abs=1e-9), model


def test_cross_validation_curve_is_shown(demo_store):
    at = _app()
    at.switch_page(shared.SPACE_PAGE).run()
    curve = at.dataframe[0].value
    assert list(curve.columns) == ["multiple_of_median", "bandwidth", "cv_error", "chosen"]
    assert curve["chosen"].sum() == 1
    assert curve["cv_error"].notna().all()


def test_picking_models_lists_neighbours_and_responses(demo_store):
    at = _app()
    at.switch_page(shared.SPACE_PAGE).run()
    picker = at.multiselect(key="space_picked_models")
    model = picker.options[0]
    picker.set_value([model]).run()
    assert not _errors(at)
    neighbours = at.dataframe[1].value
    assert neighbours["model"].eq(model).all()
    assert neighbours["rank"].tolist() == [1, 2, 3, 4, 5]
    assert model not in set(neighbours["neighbour (PKPS)"])
    responses = at.dataframe[2].value
    assert len(responses) > 0
    assert set(responses["neighbour"]) <= set(neighbours["neighbour (PKPS)"])


# ---------------------------------------------------------------------- predictions


@pytest.mark.slow
def test_predictions_export_has_the_cli_columns(demo_store, recorded_downloads):
    at = _app()
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    assert not _errors(at)
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Predictions (CSV)", "Predictions (Parquet)", "Model coordinates (CSV)"]
    csv = pd.read_csv(io.BytesIO(recorded_downloads["predictions.csv"]))
    parquet = pd.read_parquet(io.BytesIO(recorded_downloads["predictions.parquet"]))
    n_cells = DEMO_SETTINGS["n_models"] * DEMO_SETTINGS["n_tasks"]
    for frame in (csv, parquet):
        assert tuple(frame.columns[: len(OUTPUT_COLUMNS)]) == OUTPUT_COLUMNS
        assert {"target", "holdout", "bandwidth", "response_kernel", "budget"} <= set(frame)
        assert len(frame) == 3 * n_cells
        assert set(frame["method"]) == {"sample", "dkps", "pkps"}
    pd.testing.assert_series_equal(csv["prediction"], parquet["prediction"], check_dtype=False)


@pytest.mark.slow
def test_prediction_settings_change_the_results(demo_store):
    at = _app()
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    family_mae = at.dataframe[0].value
    at.multiselect[0].set_value(["sample", "pkps"])
    at.radio[0].set_value("model")
    targets = at.multiselect[1].options[:5]
    at.multiselect[1].set_value(targets)
    next(b for b in at.button if b.label == "Predict").click().run()
    assert not _errors(at)
    mae = at.dataframe[0].value
    assert list(mae.index) == ["sample", "pkps"]
    assert mae.loc["pkps", "cells"] == 5 * DEMO_SETTINGS["n_tasks"]
    assert mae.loc["pkps", "MAE"] != family_mae.loc["pkps", "MAE"]
