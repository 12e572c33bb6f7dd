"""The store's tables and the column groups the store code reads and writes.

Tables
------
``responses``
    One row per (model, task, query_id) in the canonical schema, plus the sha256 of the
    query and response texts and the source the row came from.
``embeddings``
    Vectors keyed by (text sha256, embedder key), where the key is the embedder's
    ``name`` and the column kind (query / response): nothing is embedded twice.
``embedders``
    The fitted state of each embedder key. A TF-IDF/SVD basis depends on the corpus it
    was fit on, so the store fits once (on every distinct text of that kind in the store
    at that moment) and later embeds only new texts into the same space.
    :meth:`~pkps_core.store.Store.reset_embeddings` drops both tables to refit on the
    current corpus.
``ingests``
    One row per successful ingest with its counts and the importer's notes (e.g. which
    tasks had a lower-is-better metric, stored as 1 − score).
``meta``
    ``version``: a counter bumped by every change to ``responses`` (the app's cache key).
"""

from __future__ import annotations

from pkps_core.records import CANONICAL_COLUMNS

_SCALAR_COLUMNS = ("query", "response", "score", "reference_score")
_EMBEDDING_COLUMNS = ("query_embedding", "response_embedding")
_CONTENT_COLUMNS = CANONICAL_COLUMNS  # the canonical schema, in its order
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value BIGINT NOT NULL)
    """,
    """
    CREATE TABLE IF NOT EXISTS responses (
        model VARCHAR NOT NULL,
        task VARCHAR NOT NULL,
        query_id VARCHAR NOT NULL,
        query VARCHAR,
        response VARCHAR,
        score DOUBLE,
        family VARCHAR NOT NULL,
        reference_score DOUBLE,
        query_embedding DOUBLE[],
        response_embedding DOUBLE[],
        query_hash VARCHAR,
        response_hash VARCHAR,
        source VARCHAR,
        PRIMARY KEY (model, task, query_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS embeddings (
        text_hash VARCHAR NOT NULL,
        embedder VARCHAR NOT NULL,
        vector DOUBLE[] NOT NULL,
        PRIMARY KEY (text_hash, embedder)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS embedders (
        embedder VARCHAR PRIMARY KEY,
        state BLOB NOT NULL,
        n_texts BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS ingests (
        source VARCHAR,
        ingested_at TIMESTAMP DEFAULT current_timestamp,
        added BIGINT,
        replaced BIGINT,
        unchanged BIGINT
    )
    """,
    # the importer's notes (e.g. a lower-is-better metric stored as 1 − score); stores made
    # before the column existed gain it on first read-write open
    "ALTER TABLE ingests ADD COLUMN IF NOT EXISTS notes VARCHAR",
    "INSERT INTO meta VALUES ('version', 0) ON CONFLICT DO NOTHING",
)

# responses, scored responses and the sample score per observed cell (Store.coverage)
COVERAGE_SQL = """
SELECT model, task, count(*) AS n_responses, count(score) AS n_scored,
       avg(score) AS sample_score
FROM responses GROUP BY model, task ORDER BY model, task
"""

# The (model, query) pairs behind ρ (Store.pairedness), as integer codes: each model's
# position in name order and each (task, query_id)'s number; parameters: task, task.
# The pairs' counts are one sparse product in numpy (a self-join on the query, a cross join
# of the models and a sort of their n² names took 2.3 s at a thousand models).
PAIRED_QUERIES_SQL = """
WITH q AS (
    SELECT DISTINCT model, task, query_id FROM responses
    WHERE ?::VARCHAR IS NULL OR task = ?::VARCHAR
),
m AS (SELECT model, row_number() OVER (ORDER BY model) - 1 AS i
      FROM (SELECT DISTINCT model FROM q)),
k AS (SELECT task, query_id, row_number() OVER () - 1 AS j
      FROM (SELECT DISTINCT task, query_id FROM q))
SELECT m.i, k.j, NULL AS model FROM q JOIN m USING (model) JOIN k USING (task, query_id)
UNION ALL SELECT i, NULL, model FROM m
"""
