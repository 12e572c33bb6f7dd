"""Targets judged honestly: a target keeps a budget of responses per task, is predicted
from those and judged against its full-data cell score; without targets, a method that
reads the cell's own scores is not judged against itself."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_in_process import run_in_process
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.protocols.masks import mask_targets
from pkps_core.records import RecordsError
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic
from pkps_core.views import mae_table

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"
ALPACA_TARGETS = [
    "alpaca-7b_concise",
    "claude-2.1",
    "falcon-7b-instruct",
    "gpt4_0613_concise",
    "phi-2",
    "vicuna-13b-v1.5",
]


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


@pytest.fixture(scope="module")
def cache() -> pd.DataFrame:
    """A cache as users have one: per-response scores, no reference_score."""
    records = make_synthetic(n_models=16, n_tasks=3, budget=8, random_state=2).records
    return records.drop(columns="reference_score")


def test_targets_keep_the_budget_and_are_judged_against_their_full_data(cache):
    targets = sorted(cache["model"].unique())[:3]
    masked = mask_targets(cache, targets, 3, seed=1)
    full = cache.groupby(["model", "task"])["score"].agg(["mean", "size"])
    is_target = masked["model"].isin(targets)
    kept = masked[is_target].groupby(["model", "task"])
    assert (kept.size() <= 3).all() and (kept.size() == 3).all()
    reference = kept["reference_score"].first()
    np.testing.assert_allclose(reference, full.loc[reference.index, "mean"])
    # the others are untouched, their reference their own sample score as before
    others = masked[~is_target]
    assert len(others) == (~cache["model"].isin(targets)).sum()
    np.testing.assert_allclose(
        others.groupby(["model", "task"])["reference_score"].first(),
        full.loc[others.groupby(["model", "task"]).size().index, "mean"],
    )
    # the same seed draws the same responses; another seed others
    again = mask_targets(cache, targets, 3, seed=1)
    assert again["query_id"].tolist() == masked["query_id"].tolist()
    assert (
        mask_targets(cache, targets, 3, seed=2)["query_id"].tolist() != masked["query_id"].tolist()
    )
    # a cell that hides nothing has nothing to be judged against
    everything = mask_targets(cache, targets, 8, seed=1)
    assert everything.loc[everything["model"].isin(targets), "reference_score"].isna().all()
    # a reference_score the input gives is the truth it keeps, even where nothing is hidden
    given = mask_targets(cache.assign(reference_score=0.25), targets, 8, seed=1)
    assert (given["reference_score"] == 0.25).all()
    with pytest.raises(RecordsError, match="at least 1"):
        mask_targets(cache, targets, 0)
    with pytest.raises(RecordsError, match="'nobody'"):
        mask_targets(cache, ["nobody"], 2)


def test_without_targets_a_method_reading_its_own_scores_is_not_judged():
    predictions = pd.DataFrame(
        {
            "model": ["a", "b", "a", "b"],
            "task": ["t"] * 4,
            "method": ["sample", "sample", "pkps", "pkps"],
            "prediction": [0.5, 0.2, 0.4, 0.3],
            "reference_score": [0.5, 0.2, 0.5, 0.2],
        }
    )
    honest = mae_table(predictions, self_reference=True)
    assert np.isnan(honest.loc["sample", "MAE"]) and "not judged" in honest.loc["sample", "note"]
    assert honest.loc["pkps", "MAE"] == pytest.approx(0.1) and honest.loc["pkps", "note"] == ""
    assert mae_table(predictions).loc["sample", "MAE"] == 0.0  # a given reference: judged


@pytest.mark.slow
def test_predict_with_targets_hides_all_but_the_budget(cache, tmp_path):
    source, out = tmp_path / "c.parquet", tmp_path / "p.csv"
    cache.to_parquet(source)
    targets = sorted(cache["model"].unique())[:3]
    done = run(
        "predict", "--input", str(source), "--out", str(out), "--targets", ",".join(targets),
        "--budget", "2", "--methods", "sample,pkps", "--no-interval",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out)
    own = frame[frame["model"].isin(targets)]
    assert own["n_responses"].max() == 2
    full = cache.groupby(["model", "task"])["score"].mean()
    np.testing.assert_allclose(
        own["reference_score"],
        full.loc[list(zip(own["model"], own["task"], strict=True))].to_numpy(),
    )
    assert "at most 2" in done.stdout
    sample_mae = float(done.stdout.split("sample")[1].split()[0])
    assert sample_mae > 0  # the thin sample is judged against the full data, not itself

    plain = run("predict", "--input", str(source), "--out", str(out), "--no-interval")
    assert plain.returncode == 0, plain.stderr
    line = next(ln for ln in plain.stdout.splitlines() if ln.strip().startswith("sample"))
    assert "—" in line and "not judged" in line


@pytest.fixture(scope="module")
def alpaca_store(alpaca_template, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alpaca") / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, path)  # the run's AlpacaEval store, embedded once
    return path


@pytest.mark.slow
def test_alpaca_eval_targets_at_budget_4_pkps_beats_sample(alpaca_store, tmp_path):
    out = tmp_path / "p.csv"
    done = run(
        "predict", "--db", str(alpaca_store), "--targets", ",".join(ALPACA_TARGETS),
        "--budget", "4", "--methods", "sample,pkps", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out)
    own = frame[frame["model"].isin(ALPACA_TARGETS)]
    full = pd.read_parquet(ALPACA).groupby(["model", "task"])["score"].mean()
    np.testing.assert_allclose(
        own["reference_score"],
        full.loc[list(zip(own["model"], own["task"], strict=True))].to_numpy(),
    )
    assert own["n_responses"].max() <= 4
    table = mae_table(frame, ALPACA_TARGETS)
    assert table.loc["pkps", "cells_scored"] == table.loc["sample", "cells_scored"] == 30
    assert table.loc["pkps", "MAE"] < table.loc["sample", "MAE"]
    print(f"AlpacaEval targets, budget 4: MAE {table['MAE'].round(4).to_dict()}")

    # the Predictions page: the same table and a predicted-vs-true plot with the targets
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(shared.STORE_ENV, str(alpaca_store))
        at = AppTest.from_file(APP, default_timeout=900).run()
        at.switch_page(shared.PREDICTIONS_PAGE).run()
        at.multiselect(key="pred_methods").set_value(["sample", "pkps"])
        at.multiselect(key="pred_targets").set_value(ALPACA_TARGETS)
        at.radio(key="pred_holdout").set_value("model")
        next(b for b in at.button if b.label == "Predict").click().run()
        assert not at.exception, [e.message for e in at.exception]
    shown = at.dataframe[0].value
    assert shown.loc["pkps", "cells_scored"] == 30
    assert shown.loc["pkps", "MAE"] == pytest.approx(table.loc["pkps", "MAE"], abs=1e-9)
    assert shown.loc["sample", "MAE"] == pytest.approx(table.loc["sample", "MAE"], abs=1e-9)
    chart = next(c for c in at.get("plotly_chart") if c.key == "pred_scatter")
    assert '"x"' in chart.proto.spec and "claude-2.1" in chart.proto.spec


@pytest.mark.slow
def test_the_page_store_records_are_not_changed(alpaca_store):
    with Store(alpaca_store, read_only=True) as store:
        assert store.summary()["responses"] == len(pd.read_parquet(ALPACA))
