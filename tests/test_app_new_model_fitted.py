"""AppTest of the New model page on a store with a fitted reference predictor: the page
places models instead of refitting, says so, and offers the fit where there is none."""

from pathlib import Path

import pytest
from new_model_uploads import UPLOADED, twenty_unscored_responses
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import DEMO_SETTINGS, ensure_demo_store
from pkps_core.predictor import stored_predictor
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGE = "perspective_app/app_pages/new_model.py"
TIMEOUT = 600


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


pytestmark = pytest.mark.slow  # fits the demo store's predictor (12 profiles)


@pytest.fixture(scope="module")
def fitted_store(tmp_path_factory) -> Path:
    """The demo's responses as texts only (the store embeds them with its own embedder, so
    an upload's texts can be embedded alike), with the predictor fitted and kept."""
    folder = tmp_path_factory.mktemp("fitted")
    with Store(ensure_demo_store(folder / "demo.duckdb")) as demo:
        records = demo.records(with_embeddings=False)
    path = folder / "texts.duckdb"
    with Store(path) as store:
        store.ingest(
            records.drop(columns=["query_embedding", "response_embedding"], errors="ignore")
        )
        stored_predictor(store, holdout="family")
    return path


def test_a_store_with_a_fitted_predictor_places_the_model(fitted_store, monkeypatch):
    monkeypatch.setenv(shared.STORE_ENV, str(fitted_store))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    labels = [e.label for e in [*at.get("status"), *at.get("expander")]]
    assert any("placed by the store's fitted predictor" in label for label in labels), labels
    assert not any(b.label == "Fit the reference predictor" for b in at.button)
    metrics = _metrics(at)
    assert metrics["Rank among references"].endswith(f"of {DEMO_SETTINGS['n_models']}")
    low, high = (float(x) for x in metrics["90% interval"].split("–"))
    assert low <= float(metrics["Predicted overall"]) <= high


def test_an_upload_is_placed_and_not_stored(fitted_store, monkeypatch):
    monkeypatch.setenv(shared.STORE_ENV, str(fitted_store))
    with Store(fitted_store) as before:
        state = (before.content_hash(), before.version)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    at.radio(key="new_model_source").set_value("Upload its responses").run()
    data = twenty_unscored_responses(fitted_store)
    at.file_uploader(key="new_model_upload").set_value(("new.csv", data, "text/csv")).run()
    assert not at.exception, [e.message for e in at.exception]
    labels = [e.label for e in [*at.get("status"), *at.get("expander")]]
    assert any("placed by the store's fitted predictor" in label for label in labels), labels
    assert UPLOADED in [t.value for t in at.text]
    metrics = _metrics(at)
    assert metrics["Sample score"] == "—"
    assert metrics["Rank among references"].endswith(f"of {DEMO_SETTINGS['n_models'] + 1}")
    tasks = at.dataframe[0].value
    assert tasks["n_responses"].sum() == 20
    assert tasks["prediction"].notna().all()
    with Store(fitted_store) as after:
        assert (after.content_hash(), after.version) == state


def test_a_store_without_a_fit_refits_and_offers_one(tmp_path, monkeypatch):
    path = ensure_demo_store(tmp_path / "demo.duckdb")
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    assert not at.exception
    labels = [e.label for e in [*at.get("status"), *at.get("expander")]]
    assert any("refitted" in label for label in labels), labels
    assert any("fit the store's predictor once" in label for label in labels), labels
    assert any(b.label == "Fit the reference predictor" for b in at.button)
