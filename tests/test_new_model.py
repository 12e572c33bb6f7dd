"""The New model report (pkps_core.views.new_model) and its figures and HTML (pkps_core.report)."""

import json

import numpy as np
import pandas as pd
import pytest

from pkps_core import report as reports
from pkps_core.embed import TfidfSvdEmbedder
from pkps_core.records import RecordsError
from pkps_core.synthetic import make_synthetic
from pkps_core.views.new_model import (
    TASK_COLUMNS,
    expected_gain,
    independent_interval,
    new_model_report,
    rank_interval,
    warning_sentences,
    weighted_mean,
)
from pkps_core.views.uploaded_model import upload_target

TARGET = "fam0/model-00"


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    cache = make_synthetic(n_models=24, n_tasks=4, budget=6, rho=0.3, p_task=0.8, random_state=1)
    return cache.records


@pytest.fixture(scope="module")
def result(records):
    return new_model_report(records, TARGET)


# ---------------------------------------------------------------------- pure helpers


def test_weighted_mean_skips_missing_values():
    values = pd.Series([0.2, np.nan, 0.8])
    assert weighted_mean(values, pd.Series([1, 5, 3])) == pytest.approx((0.2 + 3 * 0.8) / 4)
    assert np.isnan(weighted_mean(pd.Series([np.nan]), pd.Series([1])))


def test_rank_interval_counts_references_above_each_end():
    references = np.array([0.9, 0.7, 0.5, 0.3, np.nan])
    rank = rank_interval(0.6, 0.4, 0.8, references)
    assert rank == {"rank": 3, "best": 2, "worst": 4, "references": 4}
    assert rank_interval(0.95, 0.95, 0.99, references)["rank"] == 1


def test_independent_interval_is_narrower_than_the_mean_of_the_ends():
    tasks = pd.DataFrame(
        {
            "prediction": [0.5, 0.4, 0.6],
            "lower": [0.3, 0.2, 0.5],
            "upper": [0.7, 0.6, 0.7],
            "task_queries": [10, 10, 20],
        }
    )
    ends = (
        weighted_mean(tasks["lower"], tasks["task_queries"]),
        weighted_mean(tasks["upper"], tasks["task_queries"]),
    )
    independent = independent_interval(tasks)
    assert ends[0] < independent["lower_independent"] < 0.525 < independent["upper_independent"]
    assert independent["upper_independent"] < ends[1]


def test_expected_gain_shrinks_like_a_standard_error_and_credits_missing_cells():
    frame = pd.DataFrame(
        {"n_responses": [1, 4, 0], "lower": [0.2, 0.3, 0.0], "upper": [0.6, 0.7, 0.9]}
    )
    gain = expected_gain(frame).to_numpy()
    assert gain[0] == pytest.approx(0.4 * (1 - np.sqrt(1 / 2)))
    assert gain[1] == pytest.approx(0.4 * (1 - np.sqrt(4 / 5)))
    assert gain[2] == pytest.approx(0.9 - 0.4)  # to the observed cells' median width


def test_warning_sentences_say_what_fired_per_task():
    tasks = pd.DataFrame(
        {
            "task": ["math", "poems", "code"],
            "extrapolation": [True, False, True],
            "extrapolation_reason": [
                "own sample score 0.95 (8 responses) above every reference (max 0.8)",
                "",
                "outside the references' region (nearest reference at 2 > 1)",
            ],
        }
    )
    sentences = warning_sentences(tasks)
    assert sentences == [
        "Task math: it scores above every reference on this task.",
        "Task code: it lies outside the references' region of the perspective space.",
    ]


def test_upload_target_needs_one_model_and_renames_a_clash(records):
    one = records[records["model"] == TARGET].drop(columns=["score"])
    combined, model, notes = upload_target(one, records[records["model"] != TARGET])
    assert model == TARGET and not notes
    assert len(combined) == len(records)

    combined, model, notes = upload_target(one, records)
    assert model == f"{TARGET} (uploaded)"
    assert (combined["model"] == model).sum() == len(one)
    assert "already holds" in notes[0]

    two = records[records["model"].isin([TARGET, "fam1/model-03"])]
    with pytest.raises(RecordsError, match="holds 2 models"):
        upload_target(two, records)


def test_upload_without_vectors_drops_the_partial_embedding_columns(records):
    texts = records.assign(query="q " + records["query_id"], response="r " + records["model"])
    one = texts[texts["model"] == TARGET].drop(columns=["query_embedding", "response_embedding"])
    combined, _, notes = upload_target(one.assign(model="new/one"), texts)
    assert "query_embedding" not in combined.columns
    assert "response_embedding" not in combined.columns
    assert any("embedded" in note for note in notes)


# ---------------------------------------------------------------------- the report


def test_report_predicts_every_task_and_the_query_weighted_overall(result, records):
    tasks = result.tasks
    assert list(tasks.columns) == list(TASK_COLUMNS)
    assert sorted(tasks["task"]) == sorted(records["task"].unique())
    assert tasks["prediction"].notna().all()
    assert (tasks["lower"] <= tasks["prediction"]).all()
    assert (tasks["prediction"] <= tasks["upper"]).all()
    queries = records.groupby("task")["query_id"].nunique()
    assert (tasks.set_index("task")["task_queries"] == queries).all()
    weights = tasks["task_queries"] / tasks["task_queries"].sum()
    assert result.overall["prediction"] == pytest.approx(
        float((tasks["prediction"] * weights).sum())
    )
    assert result.method == "ensemble" and result.holdout == "family"


def test_report_ranks_the_model_among_the_references_only(result, records):
    rank = result.rank
    assert rank["references"] == records["model"].nunique() - 1
    assert 1 <= rank["best"] <= rank["best_independent"] <= rank["rank"]
    assert rank["rank"] <= rank["worst_independent"] <= rank["worst"] <= rank["references"] + 1
    standings = result.standings
    assert (standings["role"] == "new model").sum() == 1
    assert standings.loc[standings["role"] == "new model", "rank"].item() == rank["rank"]
    assert standings["overall"].is_monotonic_decreasing
    assert len(standings) == rank["references"] + 1
    assert not standings["model"].str.contains("shadow").any()


def test_neighbours_and_scatter_hold_real_models_once(result, records):
    models = set(records["model"])
    assert len(result.neighbours) == 5
    assert set(result.neighbours["neighbour"]) <= models - {TARGET}
    assert result.neighbours["distance"].is_monotonic_increasing
    assert sorted(result.scatter["model"]) == sorted(models)
    assert (result.scatter["role"] == "new model").sum() == 1
    assert set(result.responses["neighbour"]) <= set(result.neighbours["neighbour"].head(3))


def test_next_cells_spread_the_queries_fewest_responses_first(result):
    ranking = result.next_cells
    assert len(ranking)
    assert ranking["n_responses"].is_monotonic_increasing
    for _, same in ranking.groupby("n_responses"):
        widths = same["width"].dropna().to_numpy()
        assert np.all(np.diff(widths) <= 1e-12)  # widest first among equals
    assert ranking["expected_gain"].notna().all()
    assert (ranking["n_responses"] < ranking["task_queries"]).all()
    assert list(ranking["rank"]) == list(range(1, len(ranking) + 1))


def test_report_rows_are_tasks_and_the_overall_is_apart(result):
    rows = result.rows()
    assert len(rows) == len(result.tasks) and "(overall)" not in set(rows["task"])
    assert (rows["model"] == TARGET).all()
    overall = result.overall_rows()
    assert len(overall) == 1 and "task" not in overall.columns
    assert overall["prediction"].iloc[0] == pytest.approx(result.overall["prediction"])
    assert overall["rank"].iloc[0] == result.rank["rank"]
    assert "query-weighted" in overall["averaging"].iloc[0]


def test_unknown_model_is_refused(records):
    with pytest.raises(RecordsError, match="unknown model"):
        new_model_report(records, "nobody/none")


def test_names_are_escaped_in_the_figures_and_html(result):
    hostile = "<b>bold</b><br><a href='x'>model</a>"
    scatter = result.scatter.copy()
    scatter.loc[scatter["role"] == "new model", "model"] = hostile
    tasks = result.tasks.assign(task=lambda f: "<i>" + f["task"] + "</i>")
    evil = type(result)(**{**result.__dict__, "model": hostile, "scatter": scatter, "tasks": tasks})
    figure = json.loads(reports.scatter_figure(evil).to_json())
    texts = [t for trace in figure["data"] for t in trace.get("text", [])]
    assert "&lt;b&gt;bold&lt;/b&gt;&lt;br&gt;&lt;a href='x'&gt;model&lt;/a&gt;" in texts
    assert hostile not in json.dumps(figure)
    bars = json.loads(reports.tasks_figure(evil).to_json())
    assert all(x.startswith("&lt;i&gt;") for x in bars["data"][0]["x"])
    page = reports.report_html(evil)
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<i>task" not in page


def _text_cache() -> pd.DataFrame:
    topics = ["rivers", "planets", "poems", "prime numbers", "bread", "violins"]
    rows = [
        {
            "model": f"{'alpha' if m < 3 else 'beta'}/m{m}",
            "task": task,
            "query_id": str(q),
            "query": f"Question {q} of {task} about {topics[q]}",
            "response": f"answer {'right' if (m + q) % 3 else 'wrong'} about {topics[q]} {m}",
            "score": float((m + q) % 3 != 0),
        }
        for m in range(6)
        for task in ("geo", "math")
        for q in range(6)
    ]
    return pd.DataFrame(rows)


def test_an_upload_is_embedded_by_the_stores_fitted_embedders(tmp_path):
    from pkps_core.store import Store

    cache = _text_cache()
    upload = cache[cache["model"] == "beta/m5"].assign(model="new/upload").drop(columns="score")
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(cache[cache["model"] != "beta/m5"])
        assert store.fitted_embedder("response") is None  # nothing read with vectors yet
        assert not store.has_fitted_embedder("response")
        records = store.records()
        embedders = {kind: store.fitted_embedder(kind) for kind in ("query", "response")}
        assert all(e is not None for e in embedders.values())
        assert store.has_fitted_embedder("query") and store.has_fitted_embedder("response")
        assert not store.has_fitted_embedder("query", embedder=TfidfSvdEmbedder(n_components=8))
        combined, model, notes = upload_target(upload, records, embedders)
        assert not notes  # nothing embedded afresh
        # the store's vectors are kept as they were, and the upload's are the store's own
        # for the same texts: ingesting the upload gives the same vectors
        kept = combined[combined["model"] != model].reset_index(drop=True)
        for column in ("query_embedding", "response_embedding"):
            np.testing.assert_array_equal(np.vstack(kept[column]), np.vstack(records[column]))
        store.ingest(upload)
        stored = store.records(models=[model])
    ours = combined[combined["model"] == model].sort_values(["task", "query_id"])
    np.testing.assert_allclose(
        np.vstack(ours["response_embedding"]), np.vstack(stored["response_embedding"])
    )
