"""Embed a cache's texts once per embedder, and keep the vectors on disk between runs.

The bench's neural option (all-MiniLM-L6-v2 through sentence-transformers) takes minutes
on a CPU, so its vectors are stored under ``/tmp/pkps_embed_cache`` (``$PKPS_EMBED_CACHE``
overrides), one ``.npy`` per (embedder name, texts, embedder code) keyed by the SHA-256 of
the three: a changed text, another embedder or parameter (the name carries them), or an
edit of :mod:`pkps_core.embed` is a new key, never a stale hit. (The code used to be left
out, so vectors from an earlier version of the embedder could be read back under the same
name; one unexplained shift of the new-model table may have come from that.)
"""

from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core import embed as embed_module
from pkps_core.embed import SentenceTransformerEmbedder, TfidfSvdEmbedder, embed_texts

CACHE_DIR = Path(os.environ.get("PKPS_EMBED_CACHE", "/tmp/pkps_embed_cache"))
EMBEDDERS = {"tfidf": TfidfSvdEmbedder, "minilm": SentenceTransformerEmbedder}


def code_digest() -> str:
    """SHA-256 of the embedders' source (:mod:`pkps_core.embed`)."""
    return hashlib.sha256(inspect.getsource(embed_module).encode()).hexdigest()


def _key(name: str, texts: list[str]) -> str:
    digest = hashlib.sha256(name.encode())
    digest.update(b"\x00" + code_digest().encode())
    for text in texts:
        digest.update(b"\x00" + text.encode())
    return digest.hexdigest()[:32]


def cached_embed(texts: list[str], embedder) -> np.ndarray:
    """``embed_texts(texts, embedder)``, read from / written to the disk cache."""
    path = CACHE_DIR / f"{_key(embedder.name, texts)}.npy"
    if path.exists():
        return np.load(path)
    vectors = embed_texts(texts, embedder)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def embed_with(records: pd.DataFrame, name: str) -> pd.DataFrame:
    """``records`` with ``query_embedding`` and ``response_embedding`` from embedder ``name``
    (a key of :data:`EMBEDDERS`), queries embedded once per distinct (task, query_id)."""
    embedder = EMBEDDERS[name]()
    frame = records.copy()
    responses = frame["response"].fillna("").astype(str).tolist()
    frame["response_embedding"] = list(cached_embed(responses, embedder))
    queries = frame.drop_duplicates(["task", "query_id"])
    vectors = cached_embed(queries["query"].fillna("").astype(str).tolist(), embedder)
    keys = zip(queries["task"], queries["query_id"], strict=True)
    by_query = dict(zip(keys, vectors, strict=True))
    frame["query_embedding"] = [
        by_query[key] for key in zip(frame["task"], frame["query_id"], strict=True)
    ]
    return frame
