"""Inputs checked against the schema's scale and the store's tasks: percent scores and
unknown task names are refused in one line (ingest, uploads, ``report --responses``),
partially known tasks are predicted on the shared ones with a note."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core.records import RecordsError, check_score_range, validate_records
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic
from pkps_core.uploads import match_store_tasks, parse_task_map, read_uploads

ROOT = Path(__file__).resolve().parents[1]
ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


def one_model(tasks=("t1", "t2"), scores=(0.2, 0.8)) -> pd.DataFrame:
    rows = [
        {"model": "new/m", "task": t, "query_id": f"q{i}", "query": f"q {t} {i}",
         "response": f"answer {t} {i}", "score": s}
        for t in tasks
        for i, s in enumerate(scores)
    ]  # fmt: skip
    return validate_records(pd.DataFrame(rows))


def test_scores_outside_the_unit_interval_are_refused_with_the_percent_hint():
    frame = one_model(scores=(20.0, 80.0))
    with pytest.raises(RecordsError) as error:
        check_score_range(frame)
    message = str(error.value)
    assert "\n" not in message
    assert "outside [0, 1] at rows 1, 2, 3, 4" in message and "percent" in message
    rescaled = check_score_range(frame, percent=True)
    assert rescaled["score"].tolist() == [0.2, 0.8, 0.2, 0.8]
    assert frame["score"].tolist() == [20.0, 80.0, 20.0, 80.0]  # the input is not changed
    with pytest.raises(RecordsError, match=r"outside \[0, 100\]"):
        check_score_range(one_model(scores=(20.0, 180.0)), percent=True)
    assert check_score_range(one_model()) is not None  # in range: accepted as it is


def test_the_store_refuses_percent_scores_and_keeps_what_it_held(tmp_path):
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        store.ingest(one_model(), source="good")
        before = store.records()
        with pytest.raises(RecordsError, match=r"outside \[0, 1\]"):
            store.ingest(one_model(tasks=("t3",), scores=(50.0, 100.0)), source="percent")
        after = store.records()
    assert len(after) == len(before) == 4
    assert set(after["task"]) == {"t1", "t2"}


def test_an_upload_in_percent_is_refused_unless_said_so():
    data = one_model(scores=(25.0, 75.0)).to_csv(index=False).encode()
    with pytest.raises(RecordsError, match=r"outside \[0, 1\]"):
        read_uploads([("m.csv", data)])
    records = read_uploads([("m.csv", data)], percent_scores=True).records
    assert records["score"].tolist() == [0.25, 0.75, 0.25, 0.75]


def test_tasks_the_store_lacks_are_named_mapped_or_left_out():
    upload = one_model(tasks=("t1", "x", "y"))
    with pytest.raises(RecordsError) as error:
        match_store_tasks(upload.assign(task=upload["task"] + "_v2"), ["t1", "t2"])
    message = str(error.value)
    assert "'t1_v2', 'x_v2', 'y_v2'" in message and "'t1', 't2'" in message
    kept, notes = match_store_tasks(upload, ["t1", "t2"])
    assert set(kept["task"]) == {"t1"}
    assert len(notes) == 1 and "'x', 'y'" in notes[0] and "left out" in notes[0]
    mapped, notes = match_store_tasks(upload, ["t1", "t2"], parse_task_map("x=t2"))
    assert sorted(mapped["task"].unique()) == ["t1", "t2"] and "'y'" in notes[0]
    with pytest.raises(RecordsError, match="'nope'"):
        match_store_tasks(upload, ["t1"], {"x": "nope"})
    with pytest.raises(RecordsError, match="OLD=NEW"):
        parse_task_map("x")


@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("checks") / "s.duckdb"
    records = make_synthetic(n_models=16, n_tasks=3, budget=6, random_state=5).records
    with Store(path) as db:
        db.ingest(records, source="synthetic")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_report_responses_predicts_an_uploaded_model_on_the_shared_tasks(synthetic_store, tmp_path):
    with Store(synthetic_store, read_only=True) as db:
        records = db.records()
    first = records["model"].iloc[0]
    own = records[records["model"] == first].assign(model="brand-new/model")
    tasks = sorted(own["task"].unique())
    own.loc[own["task"] == tasks[0], "task"] = "not_in_store"
    upload = tmp_path / "new.parquet"
    own.to_parquet(upload, index=False)
    before = _digest(synthetic_store)
    csv = tmp_path / "rows.csv"
    done = run(
        "report", "--db", str(synthetic_store), "--responses", str(upload), "--csv", str(csv)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("brand-new/model: predicted overall score ")
    assert "'not_in_store'" in done.stderr and "left out" in done.stderr
    rows = pd.read_csv(csv)
    per_task = rows[rows["task"].isin(tasks)].set_index("task")["n_responses"]
    # the store's task it left out is completed from the others, with no response of its own
    assert per_task[tasks[0]] == 0
    assert (per_task[tasks[1:]] == own["task"].value_counts()[tasks[1:]]).all()
    assert _digest(synthetic_store) == before


@pytest.mark.slow
@pytest.mark.skipif(not ALPACA.exists(), reason="the AlpacaEval data is not on this machine")
def test_report_responses_refuses_percent_scores_and_unknown_tasks_on_alpaca_eval(
    alpaca_template, tmp_path
):
    store = tmp_path / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, store)  # the run's AlpacaEval store, embedded once
    cache = pd.read_parquet(ALPACA)
    own = cache[cache["model"] == cache["model"].iloc[0]].groupby("task").head(4)
    own = own.assign(model="newcomer")
    percent, unknown = tmp_path / "percent.csv", tmp_path / "unknown.csv"
    own.assign(score=np.round(own["score"] * 100, 3)).to_csv(percent, index=False)
    own.assign(task=own["task"] + "_v2").to_csv(unknown, index=False)
    before = _digest(store)
    refused = run("report", "--db", str(store), "--responses", str(percent))
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "[0, 1]" in lines[0]
    refused = run("report", "--db", str(store), "--responses", str(unknown))
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "'koala_v2'" in lines[0] and "'koala'" in lines[0]
    assert _digest(store) == before
