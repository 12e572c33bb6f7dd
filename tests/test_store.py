"""The DuckDB store: one-transaction ingest, idempotence, replacement, SQL statistics, cache."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pkps_core.embed import TfidfSvdEmbedder
from pkps_core.importers import load
from pkps_core.reading import read_records
from pkps_core.records import RecordsError
from pkps_core.store import Store, text_hash

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
INJECTION = "x'); DROP TABLE responses; --"


def cache():
    """Hand-made cache: task t1 has queries q1..q3, task t2 has q1..q2.

    a answers t1:q1,q2,q3 and t2:q1; b answers t1:q1,q2 and t2:q1,q2; c answers t2:q2.
    """
    rows = [
        ("a", "t1", "q1"),
        ("a", "t1", "q2"),
        ("a", "t1", "q3"),
        ("a", "t2", "q1"),
        ("b", "t1", "q1"),
        ("b", "t1", "q2"),
        ("b", "t2", "q1"),
        ("b", "t2", "q2"),
        ("c", "t2", "q2"),
    ]
    frame = pd.DataFrame(rows, columns=["model", "task", "query_id"])
    frame["query"] = "question " + frame["task"] + " " + frame["query_id"]
    frame["response"] = "answer of " + frame["model"] + " to " + frame["query"]
    frame["score"] = np.arange(len(frame)) / 10
    return frame


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "sub" / "store.duckdb") as opened:
        opened.ingest(cache(), source="cache.csv")
        yield opened


def test_store_file_is_created_and_reopens(tmp_path):
    path = tmp_path / "new" / "s.duckdb"
    with Store.connect(path) as first:
        first.ingest(cache(), source="x")
    assert path.exists()
    with Store(path) as again:
        assert again.summary()["responses"] == 9
        assert again.version == 1


def test_summary_counts(store):
    assert store.summary() == {
        "models": 3,
        "tasks": 2,
        "families": 3,
        "responses": 9,
        "scored": 9,
        "queries": 5,
        "version": 1,
    }


def test_reingest_is_idempotent(store):
    before_hash, before_version = store.content_hash(), store.version
    report = store.ingest(cache(), source="again")
    assert (report.added, report.replaced, report.unchanged) == (0, 0, 9)
    assert store.content_hash() == before_hash
    assert store.version == before_version


def test_changed_rows_replace_and_are_reported(store):
    changed = cache().iloc[[0, 1, 8]].copy()
    changed.loc[0, "score"] = 0.99
    changed.loc[1, "response"] = "a new answer"
    extra = pd.DataFrame(
        {
            "model": ["d"],
            "task": ["t1"],
            "query_id": ["q1"],
            "query": ["question t1 q1"],
            "response": ["d says"],
            "score": [0.5],
        }
    )
    report = store.ingest(pd.concat([changed, extra]), source="update")
    assert (report.added, report.replaced, report.unchanged) == (1, 2, 1)
    assert "1 added, 2 replaced, 1 unchanged" in str(report)
    assert store.version == 2
    records = store.records(models=["a"], tasks=["t1"], with_embeddings=False)
    assert records.loc[records["query_id"] == "q1", "score"].item() == 0.99
    assert records.loc[records["query_id"] == "q2", "response"].item() == "a new answer"
    assert store.summary()["responses"] == 10
    assert list(store.ingest_log()["source"]) == ["cache.csv", "update"]


def test_coverage_counts_cells(store):
    coverage = store.coverage()
    got = {(r.model, r.task): r.n_responses for r in coverage.itertuples()}
    assert got == {("a", "t1"): 3, ("a", "t2"): 1, ("b", "t1"): 2, ("b", "t2"): 2, ("c", "t2"): 1}
    a_t1 = coverage[(coverage.model == "a") & (coverage.task == "t1")]
    assert a_t1["sample_score"].item() == pytest.approx((0.0 + 0.1 + 0.2) / 3)


def test_pairedness_per_task_matches_hand_computation(store):
    rho = store.pairedness("t1").set_index(["model_a", "model_b"])["rho"]
    # t1: a has {q1,q2,q3}, b has {q1,q2}; c is absent from t1.
    assert rho[("a", "b")] == pytest.approx(2 / 3)
    assert rho[("b", "a")] == pytest.approx(1.0)
    assert rho[("a", "a")] == 1.0
    assert ("c", "a") not in rho.index


def test_pairedness_pooled_matches_hand_computation(store):
    table = store.pairedness().set_index(["model_a", "model_b"])
    # Pooled queries: a = {t1q1,t1q2,t1q3,t2q1}, b = {t1q1,t1q2,t2q1,t2q2}, c = {t2q2}.
    assert table.loc[("a", "b"), "n_shared"] == 3
    assert table.loc[("a", "b"), "rho"] == pytest.approx(3 / 4)
    assert table.loc[("c", "b"), "rho"] == pytest.approx(1.0)
    assert table.loc[("b", "c"), "rho"] == pytest.approx(1 / 4)
    assert table.loc[("a", "c"), "rho"] == 0.0
    assert len(table) == 9


# ρ by SQL alone (a self-join on the query, every ordered pair of models): the oracle of
# Store.pairedness, which counts the shared queries by a sparse product in numpy
PAIREDNESS_BY_SQL = """
WITH q AS (
    SELECT DISTINCT model, task, query_id FROM responses
    WHERE ?::VARCHAR IS NULL OR task = ?::VARCHAR
),
sizes AS (SELECT model, count(*) AS n_queries FROM q GROUP BY model),
shared AS (
    SELECT a.model AS model_a, b.model AS model_b, count(*) AS n_shared
    FROM q a JOIN q b ON a.task = b.task AND a.query_id = b.query_id
    GROUP BY a.model, b.model
)
SELECT sa.model AS model_a, sb.model AS model_b, coalesce(s.n_shared, 0) AS n_shared,
       sa.n_queries AS n_queries_a, coalesce(s.n_shared, 0) / sa.n_queries AS rho
FROM sizes sa CROSS JOIN sizes sb
LEFT JOIN shared s ON s.model_a = sa.model AND s.model_b = sb.model
ORDER BY model_a, model_b
"""


def test_pairedness_equals_the_sql_self_join_on_a_sparse_store(tmp_path):
    rng = np.random.default_rng(7)
    names = ["Zed", "alpha", "alpha-2", "émile", "b<br>", INJECTION, "00", "m" * 40]
    rows = [
        (model, f"task{t}", f"q{q:03d}")
        for model in names
        for t in range(3)
        if rng.random() < 0.8
        for q in np.flatnonzero(rng.random(40) < rng.uniform(0.05, 0.9))
    ]
    frame = pd.DataFrame(rows, columns=["model", "task", "query_id"])
    frame["query"] = "question " + frame["task"] + " " + frame["query_id"]
    frame["response"] = "answer of " + frame["model"] + " to " + frame["query"]
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(frame, source="random")
        for task in (None, "task0", "task2", "no such task"):
            got = store.pairedness(task)
            with store._cursor() as cur:
                expected = cur.execute(PAIREDNESS_BY_SQL, [task, task]).df()
            assert (len(got) == 0) == (task == "no such task")
            # (an empty result: DuckDB gives object columns; both are empty)
            pd.testing.assert_frame_equal(got, expected, check_exact=True, check_dtype=len(got) > 0)


def test_records_round_trip_canonical(store):
    records = store.records(with_embeddings=False)
    expected = cache().sort_values(["model", "task", "query_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(records[list(expected.columns)], expected, check_dtype=False)
    assert "reference_score" not in records.columns  # never given, so absent


def test_records_filters_and_unknown_names(store):
    assert set(store.records(models=["c", "b"], with_embeddings=False)["model"]) == {"b", "c"}
    with pytest.raises(RecordsError, match="no stored responses for models"):
        store.records(models=["nobody"])


class CountingEmbedder(TfidfSvdEmbedder):
    """Records every text it is asked to fit or transform."""

    fitted: list[list[str]] = []
    transformed: list[list[str]] = []

    def fit(self, texts, y=None):
        CountingEmbedder.fitted.append(list(texts))
        return super().fit(texts)

    def transform(self, texts):
        CountingEmbedder.transformed.append(list(texts))
        return super().transform(texts)

    def fit_transform(self, texts, y=None):  # a fit and the fitted texts' vectors
        CountingEmbedder.fitted.append(list(texts))
        CountingEmbedder.transformed.append(list(texts))
        return super().fit_transform(texts)


def test_embedding_cache_embeds_only_new_texts(tmp_path):
    CountingEmbedder.fitted.clear()
    CountingEmbedder.transformed.clear()
    embedder = CountingEmbedder(n_components=4)
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(cache(), source="x")
        first = store.records(embedder=embedder)
        assert len(CountingEmbedder.fitted) == 2  # one space for queries, one for responses
        assert sorted(len(t) for t in CountingEmbedder.transformed) == [5, 9]
        CountingEmbedder.transformed.clear()

        again = store.records(embedder=embedder)
        assert CountingEmbedder.transformed == []
        np.testing.assert_array_equal(
            np.stack(first["response_embedding"]), np.stack(again["response_embedding"])
        )

        new = pd.DataFrame(
            {
                "model": ["d"],
                "task": ["t1"],
                "query_id": ["q1"],
                "query": ["question t1 q1"],
                "response": ["a brand new answer"],
                "score": [1.0],
            }
        )
        store.ingest(new, source="y")
        store.records(embedder=embedder)
        assert CountingEmbedder.transformed == [["a brand new answer"]]
        assert len(CountingEmbedder.fitted) == 2  # the stored fit is reused, not refit

    with Store(tmp_path / "s.duckdb") as reopened:
        CountingEmbedder.transformed.clear()
        reopened.records(embedder=embedder)
        assert CountingEmbedder.transformed == []


def test_precomputed_embeddings_are_used_as_given(tmp_path):
    frame = cache()
    frame["response_embedding"] = [[float(i), 1.0, 2.0] for i in range(len(frame))]
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(frame, source="x")
        records = store.records()
        row = records[(records.model == "a") & (records.query_id == "q2") & (records.task == "t1")]
        np.testing.assert_array_equal(row["response_embedding"].item(), [1.0, 1.0, 2.0])
        assert "query_embedding" in records.columns  # query text embedded by the store
        longer = cache().iloc[[0]].assign(model="z", response_embedding=[[1.0, 2.0, 3.0, 4.0]])
        with pytest.raises(RecordsError, match="store holds 3-value embeddings"):
            store.ingest(longer)


def test_text_hash_matches_duckdb():
    with Store(":memory:") as store:
        store.ingest(cache().iloc[[0]].assign(response="héllo ✓"), source="x")
        with store._cursor() as cur:
            stored = cur.execute("SELECT response_hash FROM responses").fetchone()[0]
    assert stored == text_hash("héllo ✓")


BAD_CSVS = {
    "malformed": (b'model,task,query_id,response,score\na,t,q9,"unclosed,1\n', "well-formed|EOF"),
    "latin1": ("model,task,query_id,response,score\na,t,q9,caf\xe9,1\n".encode("latin-1"), "UTF-8"),
    "missing_column": (b"model,query_id,response,score\na,q9,r,1\n", "missing required column"),
    "duplicate": (b"model,task,query_id,response,score\na,t,q9,r,1\na,t,q9,s,0\n", "duplicate"),
    "two_texts": (
        b"model,task,query_id,query,response,score\na,t,q9,x,r,1\nb,t,q9,y,s,0\n",
        "different query texts",
    ),
    "inf_score": (b"model,task,query_id,response,score\na,t,q9,r,inf\n", "infinite"),
    "string_score": (b"model,task,query_id,response,score\na,t,q9,r,good\n", "not numeric"),
    "mixed_embeddings": (
        b'model,task,query_id,response_embedding,score\na,t,q9,"[1,2]",1\nb,t,q9,"[1,2,3]",0\n',
        "unequal length",
    ),
    "empty": (b"", "empty"),
}


@pytest.mark.parametrize("name", list(BAD_CSVS))
def test_bad_input_is_rejected_and_store_unchanged(store, tmp_path, name):
    content, message = BAD_CSVS[name]
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    before = (store.summary(), store.content_hash())
    with pytest.raises(RecordsError, match=message):
        store.ingest(load(path).records, source=path.name)
    try:
        parsed = read_records(str(path))
    except RecordsError:
        parsed = None  # unreadable: the file never reaches the store
    if parsed is not None:
        # Readable but invalid: the store's own validation rejects it before writing.
        with pytest.raises(RecordsError, match=message):
            store.ingest(parsed, source=path.name)
    assert (store.summary(), store.content_hash()) == before


def test_query_text_conflict_with_stored_rows_rolls_back(store):
    before = (store.summary(), store.content_hash())
    # Valid on its own (one new row plus a replacement), but q1 of t1 is stored as another text.
    incoming = cache().iloc[[1]].assign(score=0.77)
    conflicting = cache().iloc[[0]].assign(model="z", query="another text")
    with pytest.raises(RecordsError, match="query_id 'q1' of task 't1' would have 2"):
        store.ingest(pd.concat([incoming, conflicting]), source="bad")
    assert (store.summary(), store.content_hash()) == before
    assert list(store.ingest_log()["source"]) == ["cache.csv"]


def test_nan_scores_are_kept(store):
    frame = cache().iloc[[0]].assign(model="e", score=np.nan)
    assert store.ingest(frame, source="nan").added == 1
    records = store.records(models=["a", "e"], with_embeddings=False)
    assert np.isnan(records.loc[records.model == "e", "score"].item())
    assert store.coverage().query("model == 'e'")["n_scored"].item() == 0


def test_sql_injection_model_name_is_stored_verbatim(store):
    frame = cache().iloc[[0, 1]].assign(model=INJECTION)
    report = store.ingest(frame, source=INJECTION)
    assert report.added == 2
    assert INJECTION in set(store.coverage()["model"])
    assert store.summary()["responses"] == 11
    got = store.records(models=[INJECTION], with_embeddings=False)
    assert list(got["model"]) == [INJECTION, INJECTION]
    assert INJECTION in set(store.pairedness()["model_a"])


def test_alpaca_parquet_ingests_once(tmp_path):
    path = DATA / "alpaca_eval" / "alpaca_eval_40.parquet"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    frame = pd.read_parquet(path)
    with Store(tmp_path / "a.duckdb") as store:
        first = store.ingest(frame, source=path.name)
        assert first.added == 32194
        assert store.summary()["models"] == 40 and store.summary()["tasks"] == 5
        assert store.ingest(frame, source=path.name).added == 0
