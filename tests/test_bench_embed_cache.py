"""bench/embed_cache.py: vectors come back from disk, and a changed embedder never hits."""

from __future__ import annotations

import numpy as np

import bench.embed_cache as cache
from pkps_core.embed import TfidfSvdEmbedder

TEXTS = ["the cat sat", "a dog ran far", "the cat ran", "dogs and cats", "far and away"]


def test_second_call_reads_the_disk_and_gives_the_same_vectors(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path)
    calls = []
    real = cache.embed_texts
    monkeypatch.setattr(cache, "embed_texts", lambda t, e: calls.append(1) or real(t, e))
    first = cache.cached_embed(TEXTS, TfidfSvdEmbedder(n_components=3))
    second = cache.cached_embed(TEXTS, TfidfSvdEmbedder(n_components=3))
    assert len(calls) == 1 and len(list(tmp_path.glob("*.npy"))) == 1
    np.testing.assert_array_equal(first, second)


def test_key_changes_with_texts_parameters_and_embedder_code(monkeypatch):
    base = cache._key(TfidfSvdEmbedder().name, TEXTS)
    assert base == cache._key(TfidfSvdEmbedder().name, list(TEXTS))
    assert base != cache._key(TfidfSvdEmbedder().name, TEXTS[:-1])
    assert base != cache._key(TfidfSvdEmbedder(n_components=64).name, TEXTS)
    monkeypatch.setattr(cache, "code_digest", lambda: "an edited pkps_core.embed")
    assert base != cache._key(TfidfSvdEmbedder().name, TEXTS)
