"""PKPS and DKPS compared on one picture: DKPS aligned onto PKPS, how much the two maps
agree and why, and the figure that draws both.

Classical MDS (the PKPS paper's Eq. 2) gives coordinates only up to an orthogonal
transform — Theorem 1 states its concentration "up to an orthogonal W" — so two maps of
the same models can be rotated or mirrored against each other. :class:`ProcrustesAlignment`
finds the rotation / reflection, uniform scale and translation that put DKPS's
coordinates closest to PKPS's on the models both maps hold (orthogonal Procrustes,
``scipy.linalg.orthogonal_procrustes``). :func:`map_agreement` measures the agreement on
the perspective-space distances themselves (no alignment needed there);
:func:`pairing_summary` and :func:`agreement_sentence` say why: DKPS is Eq. 1 with the
identity query kernel, so on fully paired data both compare the same responses and PKPS
tends to DKPS as the query bandwidth goes to 0 (the paired limit); with no shared query
every DKPS distance is the same and its map is arbitrary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.linalg import orthogonal_procrustes

from pkps_core.views.space import SpaceSummary

SIDE_BY_SIDE = "side by side"
OVERLAY = "overlay (DKPS → PKPS)"
MODES = (SIDE_BY_SIDE, OVERLAY)
OVERALL = "overall score"
FAMILY = "family"
RESPONSES = "responses"
TASK_PREFIX = "score in "
# every pair sharing at least this share of its queries counts as fully paired (a store
# where a few responses are missing is still in the paired limit)
PAIRED_RHO = 0.95


# ---------------------------------------------------------------------- alignment


def _as_matrix(values, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        raise ValueError(f"{name} must be a 2-D array of at least two points, got {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name} holds NaN or infinite coordinates; align finite maps only")
    return matrix


def _pad(matrix: np.ndarray, width: int) -> np.ndarray:
    return np.pad(matrix, ((0, 0), (0, width - matrix.shape[1])))


class ProcrustesAlignment:
    """Map one configuration onto another by rotation / reflection, scale and translation.

    Minimises ``‖s (X − x̄) R + ȳ − Y‖_F`` over orthogonal ``R`` and, with ``scale=True``,
    the scalar ``s > 0`` (orthogonal Procrustes: ``R`` from the SVD of ``(X − x̄)ᵀ(Y − ȳ)``,
    ``s`` = the sum of its singular values over ``‖X − x̄‖²_F``). A configuration with fewer
    columns is padded with zeros.

    Parameters
    ----------
    scale : bool, default=True
        Fit the uniform scale too (DKPS and PKPS distances have different ranges).

    Attributes
    ----------
    rotation_ : ndarray of shape (p, p)
        The orthogonal matrix (a reflection when its determinant is −1).
    scale_ : float
    moving_mean_, reference_mean_ : ndarray of shape (p,)
    disparity_ : float
        ``‖aligned − Y‖²_F / ‖Y − ȳ‖²_F`` in [0, 1]: the share of the reference's spread the
        aligned map misses (scipy.spatial.procrustes's disparity when ``scale=True``).

    References
    ----------
    Schönemann (1966), A generalized solution of the orthogonal Procrustes problem.
    """

    def __init__(self, scale: bool = True):
        self.scale = scale

    def fit(self, moving, reference) -> ProcrustesAlignment:
        """Learn the map from ``moving`` (n × p) onto ``reference`` (n × q), rows paired."""
        moving = _as_matrix(moving, "moving")
        reference = _as_matrix(reference, "reference")
        if len(moving) != len(reference):
            raise ValueError(
                f"moving has {len(moving)} points and reference {len(reference)}: align the "
                "same models in the same order"
            )
        width = max(moving.shape[1], reference.shape[1])
        moving, reference = _pad(moving, width), _pad(reference, width)
        self.moving_mean_ = moving.mean(axis=0)
        self.reference_mean_ = reference.mean(axis=0)
        centred_moving = moving - self.moving_mean_
        centred_reference = reference - self.reference_mean_
        self.rotation_, singular_sum = orthogonal_procrustes(centred_moving, centred_reference)
        spread = float((centred_moving**2).sum())
        self.scale_ = float(singular_sum / spread) if self.scale and spread > 0 else 1.0
        target = float((centred_reference**2).sum())
        residual = float(((self.transform(moving) - reference) ** 2).sum())
        self.disparity_ = residual / target if target > 0 else 0.0
        return self

    def transform(self, moving) -> np.ndarray:
        """``moving`` in the reference's frame."""
        moving = np.asarray(moving, dtype=float)
        moving = _pad(moving, len(self.moving_mean_))
        return self.scale_ * (moving - self.moving_mean_) @ self.rotation_ + self.reference_mean_


# ---------------------------------------------------------------------- agreement


@dataclass(frozen=True)
class MapAgreement:
    """How much two maps of the same models agree.

    ``distance_correlation`` is the Pearson correlation of the two distance matrices'
    off-diagonal entries (NaN when one map's distances are all equal: nothing to
    correlate); ``nearest_kept`` counts the models whose nearest neighbour is the same in
    both maps (a tie for nearest counts only when both maps tie on the same models).
    """

    n_models: int
    distance_correlation: float
    nearest_kept: int

    @property
    def nearest_share(self) -> float:
        return self.nearest_kept / self.n_models if self.n_models else float("nan")


def _nearest_sets(distance: np.ndarray) -> list[frozenset[int]]:
    masked = distance + np.diag(np.full(len(distance), np.inf))
    nearest = masked.min(axis=1, keepdims=True)
    ties = np.isclose(masked, nearest, rtol=1e-9, atol=1e-12)
    return [frozenset(np.flatnonzero(row)) for row in ties]


def map_agreement(distance_a, distance_b) -> MapAgreement:
    """Agreement of two distance matrices over the same models in the same order."""
    a = np.asarray(distance_a, dtype=float)
    b = np.asarray(distance_b, dtype=float)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(
            f"two square distance matrices of one shape needed, got {a.shape}, {b.shape}"
        )
    n = len(a)
    upper = np.triu_indices(n, k=1)
    pairs_a, pairs_b = a[upper], b[upper]
    if n < 3 or np.ptp(pairs_a) == 0 or np.ptp(pairs_b) == 0:
        correlation = float("nan")
    else:
        correlation = float(np.corrcoef(pairs_a, pairs_b)[0, 1])
    kept = sum(x == y for x, y in zip(_nearest_sets(a), _nearest_sets(b), strict=True))
    return MapAgreement(n_models=n, distance_correlation=correlation, nearest_kept=int(kept))


@dataclass(frozen=True)
class PairingSummary:
    """The store's pairedness over ordered model pairs (ρ = the share of the first model's
    queries the second also answered): its mean, the share of pairs with ρ = 0 and with
    ρ = 1 (and the lowest ρ)."""

    pairs: int
    mean_rho: float
    min_rho: float
    unpaired_share: float
    paired_share: float


def pairing_summary(pairs: pd.DataFrame) -> PairingSummary:
    """From :meth:`pkps_core.store.Store.pairedness` output (the diagonal is left out)."""
    others = pairs[pairs["model_a"] != pairs["model_b"]]
    rho = others["rho"].to_numpy(dtype=float)
    if not len(rho):
        return PairingSummary(0, *[float("nan")] * 4)
    return PairingSummary(
        pairs=len(rho),
        mean_rho=float(rho.mean()),
        min_rho=float(rho.min()),
        unpaired_share=float((rho <= 0).mean()),
        paired_share=float((rho >= 1 - 1e-12).mean()),
    )


def agreement_sentence(
    agreement: MapAgreement, pairing: PairingSummary, *, same_kernel: bool = False
) -> str:
    """What the comparison says, measured, and why (Markdown, one paragraph)."""
    n, kept = agreement.n_models, agreement.nearest_kept
    keep = f"{kept} of {n} models ({agreement.nearest_share:.0%}) keep their nearest neighbour"
    r = agreement.distance_correlation
    if same_kernel:
        return (
            "Both panels use the delta query kernel, so they are the same map. Choose the "
            "RBF query kernel to compare PKPS with DKPS."
        )
    if not np.isfinite(r):
        how = (
            "**PKPS and DKPS cannot agree here**: every DKPS distance is the same (nothing "
            f"to correlate); {keep}."
        )
    else:
        verdict = "agree closely" if r >= 0.95 else "agree broadly" if r >= 0.7 else "disagree"
        how = (
            f"**PKPS and DKPS {verdict}**: their model distances correlate at "
            f"**{r:.3f}** and {keep}."
        )
    if not pairing.pairs:
        why = "There is only one model: nothing to compare."
    elif pairing.min_rho >= PAIRED_RHO:
        every = (
            "ρ = 1 for every pair"
            if pairing.paired_share == 1
            else f"ρ ≥ {pairing.min_rho:.3f} for every pair, mean {pairing.mean_rho:.4f}"
        )
        why = (
            f"Why: the models answered the same queries ({every}). On fully "
            "paired data both compare the same responses, and DKPS is PKPS with the identity "
            "query kernel (Eq. 1 with k_Q(u, u′) = 1{u = u′}): the bandwidth → 0 limit, where "
            "the two coincide — the paired limit."
        )
    elif pairing.unpaired_share == 1:
        why = (
            "Why: no two models answered the same query (ρ = 0 for every pair), and DKPS "
            "compares models only on shared queries: its map is arbitrary. PKPS compares "
            "similar queries instead (Eq. 1 with an RBF k_Q)."
        )
    else:
        why = (
            f"Why: the models share {pairing.mean_rho:.0%} of their queries on average and "
            f"{pairing.unpaired_share:.0%} of the pairs share none. DKPS compares two models "
            "only on the queries both answered, PKPS on similar ones too: the fewer shared "
            "queries, the less DKPS knows and the more the maps part."
        )
    return f"{how} {why}"


# ---------------------------------------------------------------------- per model


def model_metadata(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model, what the points can be coloured by: overall score, family, responses,
    tasks answered, then the score in each task.

    ``cells`` is :func:`pkps_core.records.cell_table` output. The overall score is the
    query-weighted mean of the model's cell references over the tasks it answered (a
    task's weight: the most responses any model gave in it, its queries in the store),
    as the New model report and the leaderboard weigh tasks.
    """
    task_queries = cells.groupby("task")["n_responses"].max()
    weights = cells["task"].map(task_queries).astype(float)
    scored = cells.assign(weight=weights.where(cells["reference"].notna(), 0.0))
    scored["weighted"] = scored["weight"] * scored["reference"].fillna(0.0)
    per_model = scored.groupby("model", sort=True).agg(
        family=("family", "first"),
        weighted=("weighted", "sum"),
        weight=("weight", "sum"),
        responses=("n_responses", "sum"),
        tasks=("task", "nunique"),
    )
    frame = pd.DataFrame(
        {
            OVERALL: (per_model["weighted"] / per_model["weight"].where(per_model["weight"] > 0)),
            FAMILY: per_model["family"].astype(str),
            RESPONSES: per_model["responses"].astype(int),
            "tasks answered": per_model["tasks"].astype(int),
        }
    )
    by_task = cells.pivot_table(index="model", columns="task", values="reference", aggfunc="first")
    for task in sorted(by_task.columns):
        frame[f"{TASK_PREFIX}{task}"] = by_task[task].reindex(frame.index)
    frame.index.name = "model"
    return frame


def colour_options(metadata: pd.DataFrame) -> list[str]:
    """The colour-by choices, overall score first (the default)."""
    return list(metadata.columns)


def is_categorical(metadata: pd.DataFrame, column: str) -> bool:
    return not pd.api.types.is_numeric_dtype(metadata[column])


def search_models(models: Sequence[str], text: str, limit: int = 5) -> list[str]:
    """The models whose name contains ``text`` (case-insensitive), an exact match first."""
    needle = text.strip().casefold()
    if not needle:
        return []
    names = [str(m) for m in models]
    exact = [m for m in names if m.casefold() == needle]
    partial = [m for m in names if needle in m.casefold() and m not in exact]
    return (exact + partial)[:limit]


# ---------------------------------------------------------------------- the pair of maps


def _mds_matrix(summary: SpaceSummary) -> np.ndarray:
    dims = [c for c in summary.coordinates.columns if c.startswith("dim_")]
    matrix = summary.coordinates[dims].to_numpy(dtype=float)
    return matrix if matrix.shape[1] >= 2 else _pad(matrix, 2)


@dataclass(frozen=True)
class Comparison:
    """Two maps of one store's models, the second aligned onto the first.

    ``frame`` has one row per shared model: ``model, x_left, y_left, x_right, y_right,
    shift`` (the 2-D view shown; ``right`` already aligned; ``shift`` the length of the
    move from the right map's position to the left's). ``agreement`` compares the two
    perspective-space distance matrices.
    """

    frame: pd.DataFrame
    alignment: ProcrustesAlignment
    agreement: MapAgreement
    view: str


def compare_spaces(
    left: SpaceSummary,
    right: SpaceSummary,
    left_xy: np.ndarray | None = None,
    right_xy: np.ndarray | None = None,
) -> Comparison:
    """Align ``right`` (DKPS) onto ``left`` (PKPS) on their shared models and measure them.

    Without ``*_xy`` the full d-dimensional MDS coordinates are aligned and the first two
    axes of the left frame are the view; with them (e.g. UMAP layouts, row-aligned to each
    summary's models) the 2-D layouts are aligned as given.
    """
    left_models, right_models = list(left.models), list(right.models)
    right_position = {m: i for i, m in enumerate(right_models)}
    shared = [m for m in left_models if m in right_position]
    if len(shared) < 2:
        raise ValueError(
            f"the two maps share {len(shared)} model(s); at least two are needed to align them"
        )
    left_position = {m: i for i, m in enumerate(left_models)}
    left_index = np.array([left_position[m] for m in shared])
    right_index = np.array([right_position[m] for m in shared])
    use_view = left_xy is not None and right_xy is not None
    left_points = np.asarray(left_xy, dtype=float) if use_view else _mds_matrix(left)
    right_points = np.asarray(right_xy, dtype=float) if use_view else _mds_matrix(right)
    left_points, right_points = left_points[left_index], right_points[right_index]
    alignment = ProcrustesAlignment(scale=True).fit(right_points, left_points)
    aligned = alignment.transform(right_points)
    width = aligned.shape[1]
    left_points = _pad(left_points, width)
    frame = pd.DataFrame(
        {
            "model": shared,
            "x_left": left_points[:, 0],
            "y_left": left_points[:, 1],
            "x_right": aligned[:, 0],
            "y_right": aligned[:, 1],
            # the move in the full aligned space, not only in the two axes drawn
            "shift": np.linalg.norm(left_points - aligned, axis=1),
        }
    )
    agreement = map_agreement(
        left.distance[np.ix_(left_index, left_index)],
        right.distance[np.ix_(right_index, right_index)],
    )
    return Comparison(frame, alignment, agreement, "UMAP" if use_view else "MDS")


def shown_coordinates(
    comparison: Comparison,
    metadata: pd.DataFrame,
    *,
    left_name: str = "pkps",
    right_name: str = "dkps",
) -> pd.DataFrame:
    """The coordinates export: per space and model the 2-D view shown (the right map
    aligned onto the left), the view's name, the overall score, family and responses."""
    view = "UMAP" if comparison.view == "UMAP" else "MDS axes 1-2"
    aligned_to = {left_name: "", right_name: f"aligned to {left_name} (Procrustes, scaled)"}
    frames = []
    for name, side in ((left_name, "left"), (right_name, "right")):
        part = comparison.frame[["model", f"x_{side}", f"y_{side}"]].rename(
            columns={f"x_{side}": "x", f"y_{side}": "y"}
        )
        part.insert(0, "space", name)
        part["view"] = view
        part["frame"] = aligned_to[name]
        frames.append(part)
    out = pd.concat(frames, ignore_index=True)
    info = metadata.reindex(out["model"])
    out["overall_score"] = info[OVERALL].to_numpy()
    out["family"] = info[FAMILY].to_numpy()
    out["responses"] = info[RESPONSES].to_numpy()
    return out


# ---------------------------------------------------------------------- the figure
