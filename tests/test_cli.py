"""The command line, run as a user runs it: ``python -m pkps_core``."""

from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [
    "model",
    "task",
    "method",
    "prediction",
    "sample_score",
    "n_responses",
    "reference_score",
    "note",
    "lower",
    "upper",
    "extrapolation",
    "extrapolation_reason",
    "target",
    "holdout",
    "bandwidth",
    "response_kernel",
    "budget",
    "seed",
    "self_pairs",
]


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


@pytest.fixture(scope="module")
def synth_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "s.csv"
    done = run("synth", "--out", str(path), "--seed", "1")
    assert done.returncode == 0, done.stderr
    return path


def test_synth_then_predict_writes_every_cell_and_method(synth_csv, tmp_path):
    out = tmp_path / "p.csv"
    done = run(
        "predict",
        "--input",
        str(synth_csv),
        "--out",
        str(out),
        "--methods",
        "sample,dkps,pkps",
        "--holdout",
        "family",
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 60 * 12 * 3
    assert not frame.duplicated(["model", "task", "method"]).any()
    assert frame.groupby("method").size().to_dict() == {"dkps": 720, "pkps": 720, "sample": 720}
    assert frame.prediction.notna().all() and frame.reference_score.notna().all()
    mae = (frame.prediction - frame.reference_score).abs().groupby(frame.method).mean()
    assert mae["pkps"] < mae["dkps"]
    assert "MAE against reference_score" in done.stdout
    assert set(frame["self_pairs"]) == {"include"}  # Eq. (1) as written: no targets


def test_parquet_output_and_targets(synth_csv, tmp_path):
    out = tmp_path / "p.parquet"
    done = run(
        "predict",
        "--input",
        str(synth_csv),
        "--out",
        str(out),
        "--methods",
        "pkps",
        "--bandwidth",
        "median",
        "--targets",
        "fam00/model-00,fam00/model-01",
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(out)
    assert set(frame.method) == {"pkps"} and len(frame) == 720
    # the setting the run used is written, the default included: targets mean the U-statistic
    assert set(frame["self_pairs"]) == {"exclude"}


def _one_line_error(done, *needles):
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0]


def test_duplicated_row_is_refused(synth_csv, tmp_path):
    frame = pd.read_csv(synth_csv)
    bad = tmp_path / "dup.csv"
    pd.concat([frame, frame.iloc[[4]]]).to_csv(bad, index=False)
    done = run("predict", "--input", str(bad), "--out", str(tmp_path / "x.csv"))
    _one_line_error(done, "duplicate (model, task, query_id)", "rows 5,")
    assert not (tmp_path / "x.csv").exists()


def test_missing_model_column_is_refused(synth_csv, tmp_path):
    bad = tmp_path / "nomodel.csv"
    pd.read_csv(synth_csv).drop(columns="model").to_csv(bad, index=False)
    done = run("predict", "--input", str(bad), "--out", str(tmp_path / "x.csv"))
    _one_line_error(done, "missing required column", "'model'")


def test_non_numeric_score_is_refused(synth_csv, tmp_path):
    frame = pd.read_csv(synth_csv).astype({"score": object})
    frame.loc[6, "score"] = "n/a-ish"
    bad = tmp_path / "score.csv"
    frame.to_csv(bad, index=False)
    done = run("predict", "--input", str(bad), "--out", str(tmp_path / "x.csv"))
    _one_line_error(done, "'score' is not numeric", "row 7")


@pytest.mark.slow
def test_unknown_method_and_target(synth_csv, tmp_path):
    done = run(
        "predict",
        "--input",
        str(synth_csv),
        "--out",
        str(tmp_path / "x.csv"),
        "--methods",
        "oracle",
    )
    _one_line_error(done, "unknown method", "oracle")
    done = run(
        "predict",
        "--input",
        str(synth_csv),
        "--out",
        str(tmp_path / "x.csv"),
        "--targets",
        "nobody",
    )
    _one_line_error(done, "unknown target model", "nobody")


@pytest.mark.slow
def test_ingest_info_and_predict_from_store(synth_csv, tmp_path):
    db = tmp_path / "s.duckdb"
    done = run("ingest", str(synth_csv), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "2880 added, 0 replaced, 0 unchanged" in done.stdout
    again = run("ingest", str(synth_csv), "--db", str(db))
    assert "0 added, 0 replaced, 2880 unchanged" in again.stdout
    info = run("info", "--db", str(db))
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith("60 models, 12 tasks, 2880 responses, 20 families")
    assert "mean rho 0.000" in info.stdout  # the synthetic default is unpaired
    out = tmp_path / "p.csv"
    done = run("predict", "--db", str(db), "--out", str(out), "--methods", "sample,pkps")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(out)) == 60 * 12 * 2


@pytest.mark.slow
def test_store_errors_are_one_line(tmp_path):
    _one_line_error(run("info", "--db", str(tmp_path / "none.duckdb")), "no store at")
    _one_line_error(run("predict", "--out", str(tmp_path / "x.csv")), "exactly one of --input")


def test_info_on_a_one_model_store_counts_in_words_and_has_no_pair(tmp_path):
    source = tmp_path / "one.csv"
    source.write_text("model,task,query_id,query,response,score\nm1,t,q1,a,b,1\nm1,t,q2,c,d,0\n")
    db = tmp_path / "one.duckdb"
    assert run("ingest", str(source), "--db", str(db)).returncode == 0
    info = run("info", "--db", str(db))
    assert info.returncode == 0, info.stderr
    lines = info.stdout.splitlines()
    assert lines[0] == "1 model, 1 task, 2 responses, 1 family"
    assert lines[-1] == "pairedness: one model, no pair to compare"
    assert "nan" not in info.stdout


@pytest.mark.slow
def test_evaluate_leaves_out_budgets_above_every_cell_and_says_so(tmp_path):
    cache = tmp_path / "small.csv"
    made = run("synth", "--out", str(cache), "--models", "12", "--tasks", "2", "--seed", "2")
    assert made.returncode == 0, made.stderr  # 4 responses per observed cell
    args = ["evaluate", "--input", str(cache), "--protocol", "new-model", "--seeds", "1"]
    args += ["--methods", "sample", "--out", str(tmp_path / "long.csv")]
    done = run(*args, "--budgets", "2,8,16")
    assert done.returncode == 0, done.stderr
    assert "note: Budget 8, 16 is above the largest cell of this cache (4 responses)" in (
        done.stderr
    )
    assert set(pd.read_csv(tmp_path / "long.csv")["budget"]) == {2}  # no repeated rows
    quiet = run(*args, "--budgets", "2,4")
    assert quiet.returncode == 0, quiet.stderr
    assert "note: " not in quiet.stderr
    none = run(*args, "--budgets", "8")
    assert none.returncode == 2 and "Traceback" not in none.stderr
    assert none.stderr.strip().splitlines()[-1].startswith("error: no budget fits this cache")
