"""New-model paths on a store that mixes benchmarks: references that share no task with the
target do not serve it, and nothing crashes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core.predict import build_context, predict
from pkps_core.predictor import ReferencePredictor
from pkps_core.views.new_model import new_model_report


def _mixed_records() -> pd.DataFrame:
    """Group A answers tasks a1, a2; group B answers b1, b2; six models each."""
    rng = np.random.default_rng(0)
    rows = []
    for group, tasks in (("A", ("a1", "a2")), ("B", ("b1", "b2"))):
        for k in range(6):
            model = f"{group.lower()}{k}/model"
            skill = rng.normal()
            for task in tasks:
                for q in range(6):
                    rows.append(
                        {
                            "model": model,
                            "task": task,
                            "query_id": f"q{q}",
                            "query": f"{task} question {q} about topic {q % 3}",
                            "response": f"answer {q} by {group} with style {k % 3} {'long ' * k}",
                            "score": float(1 / (1 + np.exp(-(skill + rng.normal(0, 0.5))))),
                        }
                    )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def records():
    return _mixed_records()


def test_targets_with_references_that_share_no_task_are_predicted(records):
    context = build_context(records, holdout="family", targets=["a0/model"])
    out = predict(context, ["ensemble"], intervals=0.9)
    own = out[out["model"] == "a0/model"]
    assert set(own["task"]) == {"a1", "a2", "b1", "b2"}
    assert own.loc[own["task"].isin(["a1", "a2"]), "prediction"].notna().all()


def test_the_new_model_report_of_a_mixed_store(records):
    report = new_model_report(records, "a0/model")
    answered = report.tasks[report.tasks["task"].isin(["a1", "a2"])]
    assert answered["prediction"].notna().all()


def test_the_fitted_predictor_on_a_mixed_store(records):
    references = records[records["model"] != "a0/model"]
    predictor = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(references)
    thin = records[records["model"] == "a0/model"].groupby("task").head(2)
    out = predictor.predict(thin)
    assert out.loc[out["task"].isin(["a1", "a2"]), "prediction"].notna().all()


@pytest.mark.slow
def test_report_cli_on_a_mixed_store(records, tmp_path):
    source = tmp_path / "mixed.csv"
    records.to_csv(source, index=False)
    db = tmp_path / "store.duckdb"
    done = run_in_process("ingest", source, "--db", db)  # (tests/cli_in_process.py)
    assert done.returncode == 0, done.stderr
    done = run_in_process("report", "--db", db, "--model", "a0/model")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "a0/model" in done.stdout


def test_a_predictor_fitted_on_texts_embeds_new_texts_alike_and_keeps_it(records):
    from pkps_core.predictor import from_state, get_state

    references = records[records["model"] != "a0/model"]
    predictor = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(references)
    assert set(predictor.embedders_) == {"query", "response"}
    thin = records[records["model"] == "a0/model"].groupby("task").head(2)
    expected = predictor.predict(thin)
    document, arrays = get_state(predictor)
    assert all(array.dtype != object for array in arrays.values())
    again = from_state(document, arrays, references)
    got = again.predict(thin)
    np.testing.assert_allclose(got["prediction"], expected["prediction"], atol=1e-12)
