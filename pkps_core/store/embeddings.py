"""The store's embedding cache: vectors of stored texts, keyed by text hash and embedder,
and the fitted embedders they come from (:meth:`pkps_core.store.Store.records`).

scikit-learn (about a second to import) is imported only to fit or restore an embedder: a
read of texts embedded before looks their vectors up by the embedder's name alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from pkps_core.records import RecordsError
from pkps_core.store.arrow import (
    _arrow_table,
    _arrow_to_vectors,
    _first_row,
    _stage,
    _vectors_to_arrow,
)

if TYPE_CHECKING:
    from pkps_core.embed import TextEmbedder

#: ``default_embedder().name`` (a test holds them equal): the cache key of a read with the
#: default embedder, known without importing scikit-learn (about a second), which only
#: embedding texts needs; a read of vectors embedded before does not.
DEFAULT_EMBEDDER_NAME = (
    "tfidf-svd(n_components=128,max_features=20000,ngram_range=1-1,random_state=0)"
)


def _default_embedder() -> TextEmbedder:
    from pkps_core.embed import default_embedder

    return default_embedder()


def fill_embeddings(store, frame: pd.DataFrame, kind: str, template: TextEmbedder | None) -> None:
    """Fill ``frame``'s ``{kind}_embedding`` (in place) from its ``{kind}_hash`` texts'
    vectors in ``store``'s cache (:class:`~pkps_core.store.Store`), embedding the texts not
    cached yet; ``template`` None: the default embedder."""
    column, hashes = f"{kind}_embedding", frame[f"{kind}_hash"]
    has_vector = frame[column].notna()
    if has_vector.all() or hashes.isna().all():
        return
    if has_vector.any() and hashes.isna().any():
        raise RecordsError(
            f"the selection mixes rows with precomputed {column} "
            f"({int(has_vector.sum())} rows) and rows with neither vectors nor {kind} "
            f"text ({int((~has_vector & hashes.isna()).sum())} rows); select models/tasks "
            "of one kind or re-ingest the missing embeddings"
        )
    if hashes.isna().any():
        # Text for some rows only: embeddings from text cannot cover the selection.
        return
    vectors = embed_hashes(store, kind, frame, template)
    codes, distinct = pd.factorize(hashes)  # each distinct text's vector looked up once
    cells = np.empty(len(distinct), dtype=object)
    for k, text_hash in enumerate(distinct):
        cells[k] = vectors[text_hash]
    frame[column] = cells[codes]


def embed_hashes(
    store, kind: str, frame: pd.DataFrame, template: TextEmbedder | None
) -> dict[str, np.ndarray]:
    """Text hash → vector for ``frame``'s distinct ``kind`` texts: cached ones read, the
    others embedded by the store's fitted embedder (fitted on every stored text of the
    kind on first use) and cached, unless the store is read-only."""
    name = DEFAULT_EMBEDDER_NAME if template is None else template.name
    key = f"{name}|{kind}"
    wanted = frame.drop_duplicates(f"{kind}_hash")
    # Under the write lock: two sessions embedding the same new texts would otherwise
    # both fit an embedder and insert the same keys.
    with store._write_lock, store._cursor() as cur:
        cached = _arrow_table(
            cur,
            """
            SELECT e.text_hash, e.vector FROM embeddings e
            JOIN (SELECT unnest(?::VARCHAR[]) AS text_hash) w USING (text_hash)
            WHERE e.embedder = ?
            """,
            [wanted[f"{kind}_hash"].tolist(), key],
        )
        vectors = dict(
            zip(
                cached.column("text_hash").to_pylist(),
                _arrow_to_vectors(cached.column("vector")),
                strict=True,
            )
        )
        # a set lookup per hash (Series.isin on Arrow strings converts each value to a
        # pyarrow scalar in Python: a read of AlpacaEval-40's records 0.79 -> 0.56 s)
        cached_already = np.fromiter(
            (text_hash in vectors for text_hash in wanted[f"{kind}_hash"]),
            dtype=bool,
            count=len(wanted),
        )
        missing = wanted[~cached_already]
        if missing.empty:
            return vectors
        from pkps_core.embed import vectors_of

        template = _default_embedder() if template is None else template
        embedder, fitted_on = fitted_embedder_of(cur, key, kind, template, keep=not store.read_only)
        new = vectors_of(embedder, missing[kind].tolist(), fitted_on)
        if store.read_only:  # a reader embeds in memory and stores nothing
            vectors.update(zip(missing[f"{kind}_hash"], new, strict=True))
            return vectors
        rows = pa.table(
            {
                "text_hash": pa.array(missing[f"{kind}_hash"].tolist(), type=pa.string()),
                "embedder": pa.array([key] * len(missing), type=pa.string()),
                "vector": _vectors_to_arrow(list(new)),
            }
        )
        _stage(cur, "new_vectors", rows)
        cur.execute("INSERT OR IGNORE INTO embeddings SELECT * FROM new_vectors")
        cur.execute("DROP TABLE new_vectors")
    vectors.update(zip(missing[f"{kind}_hash"], new, strict=True))
    return vectors


def fitted_embedder_of(
    cur: duckdb.DuckDBPyConnection,
    key: str,
    kind: str,
    template: TextEmbedder,
    *,
    keep: bool = True,
) -> tuple[TextEmbedder, tuple[list[str], np.ndarray] | None]:
    """The kind's embedder, restored, or fitted on its texts (returned with their vectors)."""
    from sklearn.base import clone

    from pkps_core.embed import fit_transform_texts

    embedder = clone(template, safe=False)
    row = _first_row(cur, "SELECT state FROM embedders WHERE embedder = ?", [key])
    if row is not None:
        return embedder.set_state(bytes(row[0])), None
    sql = f"SELECT DISTINCT {kind} FROM responses WHERE {kind} IS NOT NULL ORDER BY {kind}"
    corpus = [text for (text,) in cur.execute(sql).fetchall()]
    vectors = fit_transform_texts(embedder, corpus)
    if keep:
        cur.execute(
            "INSERT INTO embedders VALUES (?, ?, ?)", [key, embedder.get_state(), len(corpus)]
        )
    return embedder, (corpus, vectors)
