"""``python -m pkps_core report``: the New model page's report, headless."""

from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic
from pkps_core.views.new_model import new_model_report

ROOT = Path(__file__).resolve().parents[1]
TARGET = "fam1/model-03"


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "s.duckdb"
    records = make_synthetic(
        n_models=24, n_tasks=4, budget=6, rho=0.3, p_task=0.8, random_state=3
    ).records
    with Store(path) as db:
        db.ingest(records, source="synthetic")
    return path


@pytest.mark.slow
def test_report_writes_html_and_csv_with_the_pages_numbers(store, tmp_path):
    html, csv = tmp_path / "out" / "report.html", tmp_path / "rows.csv"
    done = run(
        "report", "--db", str(store), "--model", TARGET, "--out", str(html), "--csv", str(csv)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote the report of {TARGET} to {html}")
    page = html.read_text(encoding="utf-8")
    for heading in ("Per task", "Where it stands", "What to evaluate next", "Ensemble weights"):
        assert f"<h2>{heading}</h2>" in page
    assert page.count("Plotly.newPlot") == 2  # the per-task figure and the PKPS scatter
    rows = pd.read_csv(csv)
    assert len(rows) == 4 and "(overall)" not in set(rows["task"])
    overall = pd.read_csv(tmp_path / "rows-overall.csv")
    with Store(store) as db:
        expected = new_model_report(db.records(), TARGET)
    assert overall["prediction"].iloc[0] == pytest.approx(expected.overall["prediction"])
    assert f"rank {expected.rank['rank']} of 24" in done.stdout


@pytest.mark.slow
def test_report_without_out_prints_a_summary(store):
    done = run("report", "--db", str(store), "--model", TARGET)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"{TARGET}: predicted overall score ")
    assert "rank " in first and "90% interval" in first
    assert "(overall)" not in done.stdout  # the headline has the overall; the table, tasks
    assert "nearest references in PKPS: " in done.stdout


@pytest.mark.slow
def test_report_refuses_an_unknown_model_in_one_line(store, tmp_path):
    done = run("report", "--db", str(store), "--model", "nobody/none")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown model 'nobody/none'; it is not in the records"
    ]
    missing = run("report", "--db", str(tmp_path / "none.duckdb"), "--model", TARGET)
    assert missing.returncode == 2 and "no store at" in missing.stderr


@pytest.fixture(scope="module")
def untruthed_store(tmp_path_factory) -> Path:
    """A store without reference_score: a cell's truth can only come from its responses."""
    path = tmp_path_factory.mktemp("report-budget") / "s.duckdb"
    records = make_synthetic(
        n_models=24, n_tasks=4, budget=6, rho=0.3, p_task=0.8, random_state=3
    ).records.drop(columns="reference_score")
    with Store(path) as db:
        db.ingest(records, source="synthetic")
    return path


def _rows_with_budget(store: Path, tmp_path: Path, budget: int, *extra: str):
    csv = tmp_path / f"rows-{budget}.csv"
    done = run(
        "report", "--db", str(store), "--model", TARGET, "--budget", str(budget),
        "--csv", str(csv), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return pd.read_csv(csv), done


@pytest.mark.slow
@pytest.mark.parametrize("path", ["refit", "fitted"])
def test_report_budget_judges_a_store_model_on_the_responses_hidden_from_it(
    untruthed_store, tmp_path, path
):
    if path == "fitted":
        fitted = tmp_path / "fitted.duckdb"
        fitted.write_bytes(untruthed_store.read_bytes())
        assert run("fit", "--db", str(fitted)).returncode == 0
        store = fitted
    else:
        store = untruthed_store
    with Store(store, read_only=True) as db:
        own = db.records(with_embeddings=False)
    own = own[own["model"] == TARGET]
    full = own.groupby("task")["score"].mean()
    counts = own.groupby("task").size()
    assert (counts == 6).all()  # every observed cell has 6 responses: 2 kept, 4 hidden

    rows, _ = _rows_with_budget(store, tmp_path, 2)
    observed = rows[rows["task"].isin(full.index)].set_index("task")
    assert (observed["n_responses"] == 2).all()
    # the truth is the cell's full data, never the two responses the prediction used
    assert observed["reference_score"].to_numpy() == pytest.approx(full[observed.index].to_numpy())
    assert not (observed["sample_score"] == observed["reference_score"]).all()
    # without --budget every response is read, so no score of the model is left to judge
    # it: no truth is shown (the store gives no reference_score), on either path
    whole = pd.read_csv(_whole(store, tmp_path)).set_index("task").loc[observed.index]
    assert (whole["n_responses"] == 6).all()
    assert whole["reference_score"].isna().all()

    # a budget that hides nothing leaves nothing to judge: no truth, and a note says so
    rows, done = _rows_with_budget(store, tmp_path, 6)
    assert rows["reference_score"].isna().all()
    assert "none is hidden there to judge the prediction" in done.stderr


def _whole(store: Path, tmp_path: Path) -> Path:
    csv = tmp_path / "rows-whole.csv"
    done = run("report", "--db", str(store), "--model", TARGET, "--csv", str(csv))
    assert done.returncode == 0, done.stderr
    return csv


def test_report_budget_is_for_store_models_and_at_least_one(store, tmp_path):
    upload = tmp_path / "one.csv"
    pd.DataFrame(
        {"model": ["x"], "task": ["task-00"], "query_id": ["q"], "query": ["a"], "response": ["b"]}
    ).to_csv(upload, index=False)
    for args in (
        ("--responses", str(upload), "--budget", "2"),
        ("--model", TARGET, "--budget", "0"),
    ):
        done = run("report", "--db", str(store), *args)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --budget keeps"), done.stderr
