"""AppTest of the New model page on the demo store: a store model, and an upload of 20
responses without scores that is predicted without being written to the store."""

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from alerts import details
from new_model_uploads import UPLOADED, twenty_unscored_responses
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import DEMO_SETTINGS
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGE = "perspective_app/app_pages/new_model.py"
TIMEOUT = 600


def _length(value) -> int:
    """Length of a figure array, plain or Plotly's base64 typed array."""
    if isinstance(value, dict) and "bdata" in value:
        return len(base64.b64decode(value["bdata"])) // np.dtype(value["dtype"]).itemsize
    return len(value)


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.slow
def test_new_model_page_predicts_a_store_model(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    metrics = _metrics(at)
    n_models = DEMO_SETTINGS["n_models"]
    assert metrics["Rank among references"].endswith(f"of {n_models}")
    low, high = (float(x) for x in metrics["90% interval"].split("–"))
    assert low <= float(metrics["Predicted overall"]) <= high
    assert at.text[0].value == sorted(at.selectbox(key="new_model_pick").options)[0]
    assert {t.label for t in at.tabs} == {
        "Per task",
        "Where it stands",
        "What to evaluate next",
        "Export",
    }
    charts = {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    scatter = charts["new_model_scatter"]
    assert _length(scatter["data"][0]["x"]) == n_models - 1  # references
    assert _length(scatter["data"][1]["x"]) == 1  # the new model, highlighted
    assert scatter["data"][1]["text"] == [at.text[0].value]
    assert scatter["layout"]["xaxis"]["title"]["text"].startswith("PKPS MDS axis 1")
    tables = [d.value for d in at.dataframe]
    assert len(tables[0]) == DEMO_SETTINGS["n_tasks"]  # per task
    downloads = [b for b in at.get("download_button")]
    assert {b.proto.label for b in downloads} == {
        "Report rows (CSV)",
        "Overall (CSV)",
        "Report with figures (HTML)",
    }

    other = at.selectbox(key="new_model_pick").options[5]
    at.selectbox(key="new_model_pick").set_value(other).run()
    assert not at.exception
    assert at.text[0].value == other


@pytest.mark.slow
def test_uploaded_unscored_responses_are_predicted_and_not_stored(demo_store):
    before = Store(demo_store)
    state = (before.content_hash(), before.version)
    before.close()
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    at.radio(key="new_model_source").set_value("Upload its responses").run()
    assert not at.exception
    assert not at.metric  # nothing to show before a file arrives
    data = twenty_unscored_responses(demo_store)
    at.file_uploader(key="new_model_upload").set_value(("new.csv", data, "text/csv")).run()
    assert not at.exception, [e.message for e in at.exception]
    texts = [t.value for t in at.text]
    assert UPLOADED in texts
    assert any("embedded together" in t for t in details(at))  # the page says what it did
    metrics = _metrics(at)
    assert metrics["Sample score"] == "—"  # no scores uploaded
    # every demo model is a reference now
    assert metrics["Rank among references"].endswith(f"of {DEMO_SETTINGS['n_models'] + 1}")
    assert float(metrics["Predicted overall"]) > 0
    tasks = at.dataframe[0].value
    assert tasks["n_responses"].sum() == 20
    assert tasks["prediction"].notna().all()
    after = Store(demo_store)
    assert (after.content_hash(), after.version) == state, "the upload must not be stored"
    after.close()

    next(b for b in at.button if b.label == "Add the upload to the store").click().run()
    assert not at.exception
    with Store(demo_store) as db:
        assert UPLOADED in set(db.records(with_embeddings=False)["model"])


ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"


@pytest.mark.slow
def test_twenty_unscored_responses_on_the_alpaca_eval_store(alpaca_template, tmp_path, monkeypatch):
    import pandas as pd

    cache = pd.read_parquet(ALPACA)
    path = tmp_path / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, path)  # the run's AlpacaEval store, embedded once
    with Store(path) as db:
        state = db.content_hash()
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    model = sorted(cache["model"].unique())[5]
    own = cache[cache["model"] == model].sample(20, random_state=0)
    upload = own[["model", "task", "query_id", "query", "response"]].assign(model=UPLOADED)

    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    at.radio(key="new_model_source").set_value("Upload its responses").run()
    csv = upload.to_csv(index=False).encode()
    at.file_uploader(key="new_model_upload").set_value(("new.csv", csv, "text/csv")).run()
    assert not at.exception, [e.message for e in at.exception]
    assert UPLOADED in [t.value for t in at.text]
    metrics = _metrics(at)
    assert metrics["Rank among references"].endswith(f"of {cache['model'].nunique() + 1}")
    tasks = at.dataframe[0].value
    assert tasks["n_responses"].sum() == 20
    assert tasks["prediction"].notna().all()
    # the model it was sampled from is its nearest reference in PKPS
    neighbours = next(d.value for d in at.dataframe if "neighbour" in d.value.columns)
    assert neighbours["neighbour"].iloc[0] == model
    # its answer length against the references' on the same queries, in words
    length = [c.value for c in at.caption if c.value.startswith("Answer length:")]
    assert len(length) == 1 and "than the references' answers to the same queries" in length[0]
    with Store(path) as db:
        assert db.content_hash() == state


@pytest.mark.slow
def test_a_store_model_kept_to_a_few_responses_is_judged_on_the_rest(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    model = at.selectbox(key="new_model_pick").options[3]
    at.selectbox(key="new_model_pick").set_value(model).run()
    whole = at.dataframe[0].value.set_index("task")
    at.selectbox(key="new_model_keep").set_value("2").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.query_params["new_model_keep"] in ("2", ["2"])
    kept = at.dataframe[0].value.set_index("task")
    observed = whole["n_responses"] > 0
    assert (
        kept.loc[observed, "n_responses"] == np.minimum(whole.loc[observed, "n_responses"], 2)
    ).all()
    assert (kept["prediction"] != whole["prediction"]).any()
    # the demo store gives every cell its true score: the same truth, now judging a thinner run
    np.testing.assert_allclose(kept["reference_score"], whole["reference_score"])
    caption = next(c.value for c in at.caption if c.value.startswith("Predicted from 2 of"))
    assert "the others hidden from it" in caption
