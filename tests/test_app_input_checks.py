"""AppTest: the New model and Data pages check an upload's scale and tasks against the
store — percent scores refused unless said so, unknown task names named and mappable."""

from pathlib import Path

import pandas as pd
import pytest
from alerts import details, headline
from new_model_uploads import UPLOADED
from streamlit.testing.v1 import AppTest

from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600


def scored_upload(store: Path) -> pd.DataFrame:
    """One store model's first 20 scored responses, renamed, texts and scores only."""
    with Store(store) as db:
        records = db.records(with_embeddings=False)
    model = sorted(records["model"].unique())[7]
    own = records[records["model"] == model].head(20)
    return own[["model", "task", "query_id", "query", "response", "score"]].assign(model=UPLOADED)


def errors(at: AppTest) -> str:
    texts = [*(headline(e) for e in at.error), *details(at), *(t.value for t in at.text)]
    return " ".join(texts)


@pytest.mark.slow
def test_new_model_refuses_percent_scores_and_unknown_tasks_then_maps_them(demo_store):
    upload = scored_upload(demo_store)
    tasks = sorted(upload["task"].unique())
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("perspective_app/app_pages/new_model.py").run()
    at.radio(key="new_model_source").set_value("Upload its responses").run()

    percent = upload.assign(score=upload["score"] * 100).to_csv(index=False).encode()
    at.file_uploader(key="new_model_upload").set_value(("p.csv", percent, "text/csv")).run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.metric
    assert "outside [0, 1]" in errors(at) and "percent" in errors(at)

    renamed = upload.assign(task=upload["task"] + "_v2").to_csv(index=False).encode()
    at.file_uploader(key="new_model_upload").set_value(("r.csv", renamed, "text/csv")).run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.metric
    said = errors(at)
    assert "none of the upload's tasks is in the store" in said
    assert all(f"'{t}_v2'" in said for t in tasks) and f"'{tasks[0]}'" in said

    # map the first renamed task back: predicted from it, the others named as left out
    mapping = at.selectbox(key=f"new_model_task_map_0_{tasks[0]}_v2")
    mapping.set_value(tasks[0]).run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.metric
    notes = " ".join([*(t.value for t in at.text), *details(at)])
    assert "left out" in notes and all(f"'{t}_v2'" in notes for t in tasks[1:])
    per_task = at.dataframe[0].value.set_index("task")["n_responses"]
    assert per_task[tasks[0]] == (upload["task"] == tasks[0]).sum()
    assert per_task.drop(tasks[0]).eq(0).all()


@pytest.mark.slow
def test_data_page_refuses_percent_scores_unless_ticked(demo_store, tmp_path):
    upload = scored_upload(demo_store).assign(model="pct/model")
    percent = upload.assign(score=upload["score"] * 100).to_csv(index=False).encode()
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("perspective_app/app_pages/data.py").run()
    at.file_uploader(key="data_upload").set_value(("p.csv", percent, "text/csv")).run()
    at.radio[0].set_value("the active store").run()
    next(b for b in at.button if b.label == "Import").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert "outside [0, 1]" in errors(at)
    with Store(demo_store) as db:
        assert "pct/model" not in set(db.records(with_embeddings=False)["model"])
    at.checkbox(key="data_percent_scores").check().run()
    next(b for b in at.button if b.label == "Import").click().run()
    assert not at.exception, [e.message for e in at.exception]
    with Store(demo_store) as db:
        stored = db.records(with_embeddings=False)
    own = stored[stored["model"] == "pct/model"]
    assert len(own) == 20 and own["score"].between(0, 1).all()
