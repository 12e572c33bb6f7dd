"""The Experiments results explain their blanks and their averaging.

Every row without an error says why (``note``, on the page and in the CSV), and the CSV's
``mae_weight`` reproduces the page's MAE, which is a mean over tasks of per-task means
(not the plain mean of the rows' errors).
"""

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pkps_core import protocols as P
from pkps_core import views
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "perspective_app" / "app_pages" / "experiments.py")


def _records(graded: bool = False) -> pd.DataFrame:
    records = make_synthetic(n_models=15, n_tasks=3, budget=4, random_state=5).records
    if graded:  # scores in (0, 1), not 0/1: IRT does not apply
        records = records.assign(score=0.25 + 0.5 * records["score"])
    return records


def _read_csv(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""])


def _weighted_mae(long: pd.DataFrame, keys: list[str]) -> pd.Series:
    return (long["mae_weight"] * long["abs_err"].fillna(0.0)).groupby([long[k] for k in keys]).sum()


def test_mae_weights_write_out_the_per_task_then_per_seed_mean():
    # seed 0: task a (0.1, 0.3) -> 0.2, task b (0.6) -> 0.6: 0.4; seed 1: a 0.2, b 0.2: 0.2
    rows = [
        (0, "a", "m1", 0.1), (0, "a", "m2", 0.3), (0, "b", "m1", 0.6), (0, "b", "m2", np.nan),
        (1, "a", "m1", 0.2), (1, "b", "m1", 0.0), (1, "b", "m2", 0.4),
    ]  # fmt: skip
    long = pd.DataFrame(rows, columns=["seed", "task", "model", "abs_err"])
    long = long.assign(budget=1, method="pkps")
    weights = P.mae_weights(long, ["budget"])
    assert weights[3] == 0.0  # no error, no weight
    assert weights.sum() == pytest.approx(1.0)
    assert float(np.nansum(weights * long["abs_err"])) == pytest.approx(0.3)
    assert long["abs_err"].mean() == pytest.approx(1.6 / 6)  # the plain mean is not it
    assert P.summary_table(long, ["budget"])["mae"].iloc[0] == pytest.approx(0.3)


def test_completion_csv_reproduces_the_page_mae_and_says_why_cells_are_blank():
    result = P.run_protocol(
        _records(), "completion", seeds=[0, 1], methods=["sample", "lrmc", "pkps"]
    )
    long = _read_csv(views.export_bytes(result.long, "csv"))
    assert {"note", "mae_weight"} <= set(long.columns)
    blank = long[long["abs_err"].isna()]
    assert len(blank) and (blank["note"].str.len() > 0).all()
    # the hidden cells have no responses: the sample score cannot exist there
    assert set(blank["method"]) == {"sample"}
    assert (blank["note"] == "no scored responses in this cell").all()

    summary = result.summary.set_index("method")["mae"]
    weighted = _weighted_mae(long, ["method"])
    for method in ("lrmc", "pkps"):
        assert weighted[method] == pytest.approx(summary[method], abs=1e-12)
    plain = long.groupby("method")["abs_err"].mean()
    assert abs(plain["pkps"] - summary["pkps"]) > 1e-4  # the CSV's plain mean differs

    table = _read_csv(views.export_bytes(views.summary_export(result), "csv"))
    sample = table.set_index("method").loc["sample"]
    assert np.isnan(sample["mae"]) and sample["note"] == "no scored responses in this cell"
    assert table["averaging"].str.contains("mean over tasks").all()


def test_irt_on_graded_scores_is_blank_with_its_reason():
    result = P.run_protocol(
        _records(graded=True), "query-efficiency", budgets=[2], seeds=[0], methods=["irt"]
    )
    assert result.long["y_pred"].isna().all()
    assert result.long["note"].str.contains("not binary").all()
    notes = views.blank_cells_table(result.long)
    assert notes.iloc[0]["cells without an error"] == f"{len(result.long)} of {len(result.long)}"


def test_combined_seeds_are_weighted_over_every_seed():
    records = _records()
    runs = [
        P.run_protocol(records, "completion", seeds=[seed], methods=["pkps"]).long
        for seed in (0, 1)
    ]
    combined = P.combine_results("completion", runs)
    assert combined.long["mae_weight"].sum() == pytest.approx(1.0)
    weighted = _weighted_mae(combined.long, ["method"])["pkps"]
    assert weighted == pytest.approx(combined.summary["mae"].iloc[0], abs=1e-12)


def test_the_page_says_how_it_averages_and_why_cells_are_blank(tmp_path, monkeypatch):
    path = tmp_path / "graded.duckdb"
    with Store(path) as store:
        store.ingest(_records(graded=True))
    monkeypatch.setenv("PKPS_STORE", str(path))
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.run()
    at.multiselect(key="exp_query-efficiency_budget").set_value([2])
    at.multiselect(key="exp_query-efficiency_methods").set_value(["sample", "irt"])
    at.number_input(key="exp_seeds").set_value(1)
    at.button[0].click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    captions = "\n".join(c.value for c in at.caption)
    assert "mean over tasks of each task's mean absolute error" in captions
    assert "mae_weight" in captions
    summary = at.dataframe[0].value
    assert summary["irt"].eq("—").all()
    blanks = next(d.value for d in at.dataframe if "why" in d.value.columns)
    irt = blanks[blanks["method"] == "irt"]
    assert len(irt) == 1 and "not binary" in irt["why"].iloc[0]
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download the long results (CSV)", "Download the MAE table (CSV)"]
