"""The Perspective space page's data: space summaries, scatter frames, UMAP, neighbours,
responses to similar queries, coordinate exports."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.spatial.distance import pdist, squareform

from pkps_core.space.knn import eligible_bandwidths, loo_knn_error
from pkps_core.text import plotly_safe as plotly_text

# below this many models UMAP's neighbours are found from all distances (UMAP's own
# small-data threshold), here with scipy
UMAP_EXACT_NEIGHBOURS = 4096


@dataclass(frozen=True)
class SpaceSummary:
    """What the app shows of a fitted :class:`~pkps_core.space.PerspectiveSpace`.

    Small and picklable (no cache, no kernel sums), so it can be cached by value.
    """

    coordinates: pd.DataFrame
    distance: np.ndarray
    query_kernel: str
    query_bandwidth: float
    median_query_distance: float
    bandwidth_grid: np.ndarray
    cv_errors: np.ndarray
    affinity_path: str
    eigenvalues: np.ndarray
    undefined_pairs_grid: np.ndarray

    def delta_limit_note(self) -> str:
        """Why the delta limit was or was not a candidate of the bandwidth CV ("" if it
        competed like any other grid value)."""
        grid = self.undefined_pairs_grid
        if len(grid) < 2 or self.bandwidth_grid[0] != 0 or eligible_bandwidths(grid)[0]:
            return ""
        return (
            f"not a candidate: {int(grid[0])} model pairs share no query there, so their "
            "distances are stand-ins and its error is noise"
        )

    @property
    def models(self) -> np.ndarray:
        return self.coordinates["model"].to_numpy(dtype=str)

    def cv_curve(self) -> pd.DataFrame:
        """Bandwidth grid against the leave-one-model-out KNN error (NaN-free rows)."""
        scale = self.median_query_distance
        frame = pd.DataFrame(
            {
                "bandwidth": self.bandwidth_grid,
                "multiple_of_median": self.bandwidth_grid / scale
                if scale and np.isfinite(scale)
                else np.nan,
                "cv_error": self.cv_errors,
            }
        )
        frame["chosen"] = np.isclose(frame["bandwidth"], self.query_bandwidth)
        return frame.dropna(subset=["cv_error"])


def summarize_space(space) -> SpaceSummary:
    """The displayable part of a fitted perspective space."""
    return SpaceSummary(
        coordinates=space.coordinates(),
        distance=np.asarray(space.distance_matrix_, dtype=float),
        query_kernel=space.query_kernel,
        query_bandwidth=float(space.query_bandwidth_),
        median_query_distance=float(space.median_query_distance_),
        bandwidth_grid=np.asarray(space.bandwidth_grid_, dtype=float),
        cv_errors=np.asarray(space.cv_errors_, dtype=float),
        affinity_path=str(space.affinity_path_),
        eigenvalues=np.asarray(space.eigenvalues_, dtype=float),
        undefined_pairs_grid=np.asarray(space.undefined_pairs_grid_, dtype=int),
    )


def umap_2d(coordinates: np.ndarray, random_state: int = 0) -> np.ndarray:
    """UMAP of the d-dimensional coordinates to 2-D (needs the optional ``umap-learn``).

    Raises
    ------
    ImportError
        umap-learn is not installed.
    """
    import umap  # optional dependency: imported only when the UMAP view is asked for

    n = len(coordinates)
    if n < 4:
        return np.asarray(coordinates, dtype=float)[:, :2]
    coordinates = np.asarray(coordinates, dtype=float)
    n_neighbors = min(15, n - 1)
    exact = (None, None, None)  # UMAP's default: it searches itself
    if n < UMAP_EXACT_NEIGHBOURS:
        # the exact neighbours UMAP would find by all distances too, handed over: its own
        # search is numba code compiled on first use (6 of the first view's 11 s here)
        distances = squareform(pdist(coordinates))
        indices = np.argsort(distances, axis=1, kind="stable")[:, :n_neighbors]
        exact = (indices, np.take_along_axis(distances, indices, axis=1), None)
    reducer = umap.UMAP(
        n_components=2,
        n_neighbors=n_neighbors,
        random_state=random_state,
        init="random",
        n_jobs=1,
        precomputed_knn=exact,
    )
    with warnings.catch_warnings():  # without a search index UMAP cannot transform: unused
        warnings.filterwarnings("ignore", message=".*knn_search_index.*")
        return reducer.fit_transform(coordinates)


def scatter_frame(
    summary: SpaceSummary, cells: pd.DataFrame, task: str, xy: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per model: 2-D position, family, score in ``task``, responses there and overall.

    ``score`` is the cell's reference (its trusted full-task score, else the sample score);
    NaN where the model has no responses in ``task``. ``xy`` defaults to the first two
    MDS axes.
    """
    coordinates = summary.coordinates
    if xy is None:
        dims = [c for c in coordinates.columns if c.startswith("dim_")]
        xy = (
            coordinates[dims[:2]].to_numpy()
            if len(dims) >= 2
            else np.c_[coordinates[dims[0]].to_numpy(), np.zeros(len(coordinates))]
        )
    in_task = cells[cells["task"] == task].set_index("model")
    frame = pd.DataFrame(
        {
            "model": coordinates["model"],
            "family": coordinates["family"],
            "x": xy[:, 0],
            "y": xy[:, 1],
            "score": coordinates["model"].map(in_task["reference"]),
            "sample_score": coordinates["model"].map(in_task["sample_score"]),
            "task_responses": coordinates["model"].map(in_task["n_responses"]).fillna(0),
            "responses": coordinates["n_responses"],
        }
    )
    frame["task_responses"] = frame["task_responses"].astype(int)
    return frame


def selected_models(*selections: object) -> list[str]:
    """Model ids of the points in Plotly selection states (through ``customdata[0]``).

    Accepts the ``event.selection`` mappings returned by ``st.plotly_chart(...,
    on_select="rerun")``; points without customdata (e.g. a reference line) are ignored.
    """
    chosen: list[str] = []
    for selection in selections:
        if not selection:
            continue
        for point in selection.get("points", []) or []:
            custom = point.get("customdata")
            if isinstance(custom, list | tuple) and custom:
                model = str(custom[0])
            elif isinstance(custom, str):
                model = custom
            else:
                continue
            if model not in chosen:
                chosen.append(model)
    return chosen


def nearest_neighbours(
    distance: np.ndarray,
    models: Sequence[str],
    selected: Sequence[str],
    k: int = 5,
    *,
    coordinates: np.ndarray | None = None,
) -> pd.DataFrame:
    """The ``k`` nearest other models of each selected model in the space.

    ``coordinates`` (the MDS embedding, one row per model), when given, orders models at
    the same ``distance`` by their distance there — where ``D`` ties (a thin model's
    distances clipped at 0), the coordinates the KNN regression reads still tell them apart.

    Returns
    -------
    DataFrame
        Columns ``model, rank, neighbour, distance`` (rank 1 = nearest), ties broken by
        the coordinates' distance, then by name.
    """
    models = np.asarray(models, dtype=str)
    position = {m: i for i, m in enumerate(models)}
    rows = []
    for model in selected:
        if model not in position:
            continue
        i = position[model]
        others = np.array([j for j in range(len(models)) if j != i], dtype=int)
        apart = (
            np.zeros(len(others))
            if coordinates is None
            else np.linalg.norm(coordinates[others] - coordinates[i], axis=1)
        )
        order = np.lexsort((models[others], apart, distance[i, others]))[:k]
        for rank, j in enumerate(others[order], start=1):
            rows.append(
                {
                    "model": model,
                    "rank": rank,
                    "neighbour": models[j],
                    "distance": float(distance[i, j]),
                }
            )
    return pd.DataFrame(rows, columns=["model", "rank", "neighbour", "distance"])


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def similar_query_responses(
    records: pd.DataFrame, model: str, others: Sequence[str], n: int = 3
) -> pd.DataFrame:
    """A few responses of ``model`` next to other models' responses to similar queries.

    For every query of ``model`` the most similar query each other model answered is
    found — by cosine similarity of query embeddings where the records carry them (the
    RBF kernel's view), otherwise only the identical (task, query_id) (the delta
    kernel's). The ``n`` most similar pairs per other model are returned.

    Returns
    -------
    DataFrame
        Columns ``neighbour, similarity, task, query, response, score, neighbour_task,
        neighbour_query, neighbour_response, neighbour_score``.
    """
    columns = [
        "neighbour",
        "similarity",
        "task",
        "query",
        "response",
        "score",
        "neighbour_task",
        "neighbour_query",
        "neighbour_response",
        "neighbour_score",
    ]
    frame = records.reset_index(drop=True)
    for column in ("query", "response", "score"):
        if column not in frame.columns:
            frame[column] = None if column != "score" else np.nan
    own = frame[frame["model"] == model]
    if own.empty:
        return pd.DataFrame(columns=columns)
    has_vectors = "query_embedding" in frame.columns
    own_vectors = _unit_rows(np.vstack(own["query_embedding"].tolist())) if has_vectors else None
    out = []
    for other in others:
        theirs = frame[frame["model"] == other]
        if theirs.empty or other == model:
            continue
        if has_vectors:
            similarity = own_vectors @ _unit_rows(np.vstack(theirs["query_embedding"].tolist())).T
            best = similarity.argmax(axis=1)
            best_similarity = similarity[np.arange(len(own)), best]
        else:
            key_of = {
                k: j for j, k in enumerate(zip(theirs["task"], theirs["query_id"], strict=True))
            }
            match = [key_of.get(k, -1) for k in zip(own["task"], own["query_id"], strict=True)]
            best = np.maximum(np.asarray(match, dtype=int), 0)
            best_similarity = np.where(np.asarray(match) >= 0, 1.0, np.nan)
        ranked = np.argsort(-np.nan_to_num(best_similarity, nan=-np.inf), kind="stable")[:n]
        for i in ranked:
            if not np.isfinite(best_similarity[i]):
                continue
            mine, match_row = own.iloc[i], theirs.iloc[best[i]]
            out.append(
                {
                    "neighbour": other,
                    "similarity": float(best_similarity[i]),
                    "task": mine["task"],
                    "query": mine["query"],
                    "response": mine["response"],
                    "score": mine["score"],
                    "neighbour_task": match_row["task"],
                    "neighbour_query": match_row["query"],
                    "neighbour_response": match_row["response"],
                    "neighbour_score": match_row["score"],
                }
            )
    return pd.DataFrame(out, columns=columns)


def coordinates_export(summaries: dict[str, SpaceSummary]) -> pd.DataFrame:
    """Model coordinates of several spaces in one long frame (``space`` first column)."""
    frames = [s.coordinates.assign(space=name) for name, s in summaries.items()]
    combined = pd.concat(frames, ignore_index=True)
    return combined[["space", *[c for c in combined.columns if c != "space"]]]


def dkps_pairing_note(pairs: pd.DataFrame) -> str | None:
    """What the DKPS panel must say when models share few or no queries, else None.

    ``pairs`` is :meth:`pkps_core.store.Store.pairedness` output (ρ per ordered model pair).
    DKPS compares two models only on the queries both answered: at ρ = 0 for every pair
    each DKPS distance is the same, so its map and its neighbours mean nothing.
    """
    others = pairs[pairs["model_a"] != pairs["model_b"]]
    if not len(others):
        return None
    unpaired = float((others["rho"] <= 0).mean())
    if unpaired == 1.0:
        return (
            "DKPS has no shared queries to compare: no two models answered the same query "
            "(ρ = 0 for every pair), so every DKPS distance is the same (1), its map is "
            "arbitrary and its nearest neighbours are meaningless (ties in name order). "
            "PKPS (left) compares similar queries instead."
        )
    if unpaired >= 0.5:
        return (
            f"{unpaired:.0%} of the model pairs share no query (ρ = 0): DKPS cannot compare "
            "them, so their DKPS distances are all the largest value and carry no information."
        )
    return None


def delta_limit_error(summary: SpaceSummary, cells: pd.DataFrame, k: int = 8) -> float:
    """The CV criterion (leave-one-model-out KNN MAE) at the delta limit of the bandwidth.

    ``summary`` is the delta-kernel (DKPS) fit, whose coordinates are the bandwidth → 0
    limit of PKPS; ``cells`` is :func:`pkps_core.records.cell_table` output.
    """
    coordinates = summary.coordinates
    dims = [c for c in coordinates.columns if c.startswith("dim_")]
    return loo_knn_error(coordinates[dims].to_numpy(dtype=float), cells, summary.models, k)


def chosen_multiple(summary: SpaceSummary, options: Sequence[float]) -> float:
    """The option (multiple of the median query distance) nearest the fit's bandwidth."""
    scale = summary.median_query_distance
    if not (scale and np.isfinite(scale)) or summary.query_kernel == "delta":
        return float(options[0])
    multiple = summary.query_bandwidth / scale
    values = np.asarray(options, dtype=float)
    return float(values[np.argmin(np.abs(values - multiple))])


def colour_label(cells: pd.DataFrame, task: str) -> str:
    """The colour bar's title: the task and which score colours the points.

    The points carry the cell's reference (its ``reference_score``, else its sample
    score; see :func:`scatter_frame`).
    """
    in_task = cells[cells["task"] == task]
    has_reference = "reference_score" in in_task and in_task["reference_score"].notna().any()
    kind = "reference score" if has_reference else "sample score"
    return f"{plotly_text(task)}<br>{kind}"


def merge_selection(
    picked: Sequence[str], from_charts: Sequence[str], models: Sequence[str]
) -> list[str]:
    """The picked models followed by new chart selections, restricted to ``models``."""
    valid = set(map(str, models))
    return [m for m in dict.fromkeys([*picked, *from_charts]) if m in valid]
