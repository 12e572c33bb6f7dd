"""AppTest: the Predictions page's settings and the New model page's model live in the URL.

A session that starts from a URL (a reload, a second tab, a shared link) shows the URL's
settings, and what the user submits is written back.
"""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
PREDICTIONS = str(ROOT / "perspective_app" / "app_pages" / "predictions.py")
NEW_MODEL = str(ROOT / "perspective_app" / "app_pages" / "new_model.py")


@pytest.fixture()
def store(tmp_path, monkeypatch) -> list[str]:
    records = make_synthetic(n_models=12, n_tasks=3, budget=6, random_state=3).records
    path = tmp_path / "small.duckdb"
    with Store(path) as opened:
        opened.ingest(records)
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    monkeypatch.setenv("PKPS_DATA_DIR", str(tmp_path))
    return sorted(records["model"].unique())


def test_predictions_start_from_the_urls_settings_and_write_back_a_submit(store):
    target = store[4]
    at = AppTest.from_file(PREDICTIONS, default_timeout=300)
    at.query_params.update(
        pred_methods=["sample", "pkps"],
        pred_targets=[target, "no-such-model"],
        pred_holdout="model",
        pred_bandwidth="median",
        pred_budget="2",
        pred_intervals="False",
    )
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.multiselect(key="pred_methods").value == ["sample", "pkps"]
    assert at.multiselect(key="pred_targets").value == [target]  # unknown names dropped
    assert at.radio(key="pred_holdout").value == "model"
    assert at.radio(key="pred_bandwidth").value == "median"
    assert at.number_input(key="pred_budget").value == 2
    assert at.checkbox(key="pred_intervals").value is False
    # the result used them: the settings the page predicted with
    assert at.session_state["prediction_settings"]["targets"] == [target]
    assert at.session_state["prediction_settings"]["budget"] == 2
    assert "saw at most 2 of them" in "\n".join(c.value for c in at.caption)

    at.number_input(key="pred_budget").set_value(3)
    at.multiselect(key="pred_targets").set_value([store[0], target])
    next(b for b in at.button if b.label == "Predict").click().run()
    assert not at.exception
    assert at.query_params["pred_budget"] == "3"
    assert at.query_params["pred_targets"] == [store[0], target]
    assert at.query_params["pred_holdout"] == "model"


def test_no_targets_in_the_url_stay_none_and_an_empty_url_gives_the_defaults(store):
    at = AppTest.from_file(PREDICTIONS, default_timeout=300)
    at.query_params["pred_targets"] = ""
    at.run()
    assert not at.exception
    assert at.multiselect(key="pred_targets").value == []
    assert at.multiselect(key="pred_methods").value == ["sample", "dkps", "pkps"]
    assert at.query_params["pred_targets"] == ""


def test_new_model_opens_on_the_urls_model_and_keeps_the_choice(store):
    at = AppTest.from_file(NEW_MODEL, default_timeout=300)
    at.query_params.update(new_model_pick=store[5], new_model_holdout="model", new_model_keep="4")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="new_model_pick").value == store[5]
    assert at.radio(key="new_model_holdout").value == "model"
    assert at.selectbox(key="new_model_keep").value == "4"
    at.selectbox(key="new_model_pick").set_value(store[2]).run()
    assert not at.exception
    assert at.query_params["new_model_pick"] == store[2]
    assert at.query_params["new_model_source"] == "From the store"
