"""From validated records to the arrays the kernels need: layout, vectors, PCA.

Responses are sorted by model and grouped into a :class:`~pkps_core.space.kernels.ResponseLayout`;
texts without embeddings go through the offline embedder; response and query vectors may be
reduced by PCA (to a fixed size or to the second Zhu–Ghodsi elbow).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pkps_core.records import (
    RecordsError,
    _rows,
    cell_table,
    response_representation,
    validate_records,
)
from pkps_core.space.kernels import ResponseLayout


def zhu_ghodsi_elbows(values: np.ndarray, n_elbows: int = 2) -> list[int]:
    """Elbows of a scree plot by profile likelihood (Zhu and Ghodsi, 2006).

    Parameters
    ----------
    values : ndarray
        Eigen/singular values in decreasing order.
    n_elbows : int
        How many successive elbows to return (each is searched after the previous one).

    Returns
    -------
    list of int
        Elbow positions as the number of leading values to keep (1-based counts).
    """
    values = np.sort(np.asarray(values, dtype=float))[::-1]
    elbows: list[int] = []
    offset = 0
    for _ in range(n_elbows):
        rest = values[offset:]
        if rest.size < 2:
            break
        best_q, best_ll = 1, -np.inf
        for q in range(1, rest.size):
            first, second = rest[:q], rest[q:]
            mu1, mu2 = first.mean(), second.mean()
            pooled = (((first - mu1) ** 2).sum() + ((second - mu2) ** 2).sum()) / max(
                rest.size - 2, 1
            )
            sigma = np.sqrt(max(pooled, 1e-12 * max(rest.var(), 1e-300)))
            ll = -0.5 * (((first - mu1) ** 2).sum() + ((second - mu2) ** 2).sum()) / (
                sigma**2
            ) - rest.size * np.log(sigma)
            if ll > best_ll:
                best_ll, best_q = ll, q
        elbows.append(offset + best_q)
        offset += best_q
    return elbows


@dataclass(frozen=True)
class PreparedCache:
    """A validated cache turned into arrays: responses sorted by model."""

    layout: ResponseLayout
    models: np.ndarray
    families: np.ndarray
    tasks: np.ndarray
    query_keys: pd.DataFrame
    query_vectors: np.ndarray | None
    response_vectors: np.ndarray
    scores: np.ndarray
    task_of_response: np.ndarray
    representation: str
    cells: pd.DataFrame
    frame: pd.DataFrame
    query_gap: str | None = None


def _stack(column: pd.Series) -> np.ndarray:
    return np.vstack([np.asarray(v, dtype=float) for v in column.tolist()])


def prepare_cache(
    records: pd.DataFrame, embedder=None, *, validated: bool = False
) -> PreparedCache:
    """Validate a cache and build the response/query arrays the kernels need.

    Text without embeddings is embedded with ``embedder`` (default: the offline embedder
    of :mod:`pkps_core.embed`). A score-only cache uses the per-response score as a 1-d
    response representation.
    """
    frame = records if validated else validate_records(records)
    representation = response_representation(frame)
    needs_text_embedding = representation == "text" or (
        "query_embedding" not in frame.columns
        and "query" in frame.columns
        and frame["query"].notna().all()
    )
    query_gap = _query_gap(frame) if "query_embedding" not in frame.columns else None
    if needs_text_embedding:
        from pkps_core.embed import embed_records  # here: scikit-learn takes ~1 s to import

        frame = embed_records(frame, embedder=embedder)
        representation = response_representation(frame)
    frame = frame.sort_values(["model", "task", "query_id"], kind="stable").reset_index(drop=True)
    models, model_idx = np.unique(frame["model"].to_numpy(dtype=str), return_inverse=True)
    tasks, task_idx = np.unique(frame["task"].to_numpy(dtype=str), return_inverse=True)
    keys = frame[["task", "query_id"]].astype(str)
    query_codes, query_uniques = pd.MultiIndex.from_frame(keys).factorize()
    query_keys = query_uniques.to_frame(index=False)
    scores = (
        frame["score"].to_numpy(dtype=float)
        if "score" in frame.columns
        else np.full(len(frame), np.nan)
    )
    if representation == "embedding":
        response_vectors = _stack(frame["response_embedding"])
    else:
        if np.isnan(scores).any():
            raise RecordsError(
                "a score-only cache needs a score on every row: the score is the response "
                "representation; fill the empty scores or add response text"
            )
        response_vectors = scores[:, None].copy()
        representation = "score"
    query_vectors = None
    if "query_embedding" in frame.columns:
        first = pd.Series(np.arange(len(frame))).groupby(query_codes).first().to_numpy()
        query_vectors = _stack(frame["query_embedding"].iloc[first])
    family_of_model = frame.groupby("model", sort=True)["family"].first()
    layout = ResponseLayout.build(model_idx, query_codes, len(models), len(query_keys))
    return PreparedCache(
        layout=layout,
        models=models,
        families=family_of_model.loc[models].to_numpy(dtype=str),
        tasks=tasks,
        query_keys=query_keys,
        query_vectors=query_vectors,
        response_vectors=response_vectors,
        scores=scores,
        task_of_response=task_idx,
        representation=representation,
        cells=cell_table(frame),
        query_gap=query_gap,
        frame=frame,
    )


def reduce_dimension(vectors: np.ndarray, components, random_state) -> np.ndarray:
    """PCA to ``components`` (int), to the second Zhu–Ghodsi elbow ("elbow"), or not (None)."""
    if components is None:
        return vectors
    from sklearn.decomposition import PCA  # here: sklearn takes ~1 s to import

    max_rank = min(vectors.shape)
    if components == "elbow":
        full = PCA(n_components=min(max_rank, 256), random_state=random_state).fit(vectors)
        elbows = zhu_ghodsi_elbows(full.explained_variance_, n_elbows=2)
        n_keep = elbows[-1] if elbows else 1
        return full.transform(vectors)[:, : min(n_keep, 48)]
    n_keep = min(int(components), max_rank)
    if n_keep >= vectors.shape[1]:
        return vectors
    return PCA(n_components=n_keep, random_state=random_state).fit_transform(vectors)


def _query_gap(frame: pd.DataFrame) -> str | None:
    """Which rows lack query text when others have it (the RBF query kernel needs all)."""
    if "query" not in frame.columns:
        return None
    missing = frame["query"].isna()
    if not missing.any() or missing.all():
        return None
    keys = frame.loc[missing, ["task", "query_id"]].drop_duplicates()
    task, query_id = keys.iloc[0]
    which = f"query_id {query_id!r} of task {task!r}"
    which = f"{which} has" if len(keys) == 1 else f"{len(keys)} queries (e.g. {which}) have"
    return f"{which} no query text: column 'query' is empty at {_rows(missing.to_numpy())}"


def append_models(prepared: PreparedCache, new: pd.DataFrame) -> PreparedCache:
    """``prepared`` with the validated records of new models added, without preparing the
    old responses again (what :func:`~pkps_core.space.prepare_cache` of the concatenated
    records gives: responses sorted by model, then task and query id; new queries after the
    old ones). ``new`` has the old records' columns, embeddings included, and only models
    and tasks ``prepared`` knows the tasks of."""
    added = prepare_cache(new, validated=True)
    frame = pd.concat([prepared.frame, added.frame], ignore_index=True)
    models = np.union1d(prepared.models, added.models)
    model_idx = np.searchsorted(models, frame["model"].to_numpy(dtype=str))
    order = np.argsort(model_idx, kind="stable")
    frame = frame.iloc[order].reset_index(drop=True)
    old_keys = pd.MultiIndex.from_frame(prepared.query_keys.astype(str))
    new_keys = pd.MultiIndex.from_frame(added.query_keys.astype(str))
    fresh = ~new_keys.isin(old_keys)
    query_keys = pd.concat([prepared.query_keys, added.query_keys[fresh]], ignore_index=True)
    all_keys = pd.MultiIndex.from_frame(query_keys.astype(str))
    added_idx = all_keys.get_indexer(new_keys)[added.layout.query_idx]
    query_idx = np.concatenate([prepared.layout.query_idx, added_idx])[order]
    query_vectors = prepared.query_vectors
    if query_vectors is not None and fresh.any():
        query_vectors = np.vstack([query_vectors, added.query_vectors[fresh]])
    layout = ResponseLayout.build(model_idx[order], query_idx, len(models), len(query_keys))
    task_of_response = np.searchsorted(prepared.tasks, frame["task"].to_numpy(dtype=str))
    families = pd.Series(
        np.concatenate([prepared.families, added.families]),
        index=np.concatenate([prepared.models, added.models]),
    )
    cells = pd.concat([prepared.cells, added.cells], ignore_index=True)
    cells = cells.sort_values(["model", "task"], kind="stable").reset_index(drop=True)
    return dataclasses.replace(
        prepared,
        layout=layout,
        models=models,
        families=families.loc[models].to_numpy(dtype=str),
        query_keys=query_keys,
        query_vectors=query_vectors,
        response_vectors=_merged_rows(prepared.response_vectors, added.response_vectors, order),
        scores=np.concatenate([prepared.scores, added.scores])[order],
        task_of_response=task_of_response,
        cells=cells,
        frame=frame,
    )


def _merged_rows(old: np.ndarray, new: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``np.vstack([old, new])[order]`` written into one fresh array, without the stacked
    copy between (a profile's references and shadows: 52 MB on AlpacaEval-40)."""
    out = np.empty((len(order), old.shape[1]), dtype=np.result_type(old, new))
    where = np.empty_like(order)
    where[order] = np.arange(len(order))
    out[where[: len(old)]] = old
    out[where[len(old) :]] = new
    return out
