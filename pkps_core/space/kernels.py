"""Query and response kernels and the affinity A and distance D of PKPS Eqs. (1)–(2).

Pure array math, shared by every path of the kernel sums (:mod:`pkps_core.space.sums`):
the response layout, squared distances, RBF kernels, the self-pair terms, the Nyström
path's diagonal fix, A and D from the sums, and the bounds on D's error that the engine
(:mod:`pkps_core.space.affinity`) decides its paths by. Functions that can use threads
take an optional :class:`WorkerPool`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pkps_core.space.runtime import WorkerPool

RESPONSE_KERNELS = ("linear", "rbf", "cosine")
QUERY_KERNELS = ("rbf", "delta")
#: Query bandwidths of the CV, as multiples of the median query distance
#: (:class:`~pkps_core.space.PerspectiveSpace`); here, where no scikit-learn is imported
BANDWIDTH_GRID = (0.03, 0.1, 0.3, 1.0, 3.0)
# What the selectors offer. Response vectors are unit-normalised before the kernel (the
# PKPS paper's setting: a linear kernel on unit-normalised PCA responses, Section 5 and
# the appendix), and on unit vectors the linear kernel *is* the cosine kernel, so the two
# gave identical maps; one of them is offered, with RESPONSE_KERNEL_NOTE saying why.
# "cosine" stays accepted by the estimator for callers that name it.
RESPONSE_KERNEL_CHOICES = ("linear", "rbf")
RESPONSE_KERNEL_NOTE = (
    "Response vectors are unit-normalised (the PKPS paper's setting), so the linear kernel "
    "is the cosine kernel; cosine is not offered separately. rbf compares the same unit "
    "vectors through exp(−‖x − x′‖² / 2σ²)."
)
# Dropping the self pairs subtracts them from the diagonal sums; when what is left is
# below this fraction of the total, the difference has lost too many digits to use
# (1e-6 leaves ~10 significant digits) and A_ii keeps the self pairs.
SELF_PAIR_MIN_MASS = 1e-6
# Share of model pairs with D² < 0 beyond which the U-statistic diagonal is not used.
NEGATIVE_SHARE_LIMIT = 0.5
PARALLEL_MIN_ENTRIES = 1 << 20  # kernel matrices at least this large are exponentiated in parallel
UNDERFLOW_EXPONENT = 708.0  # exp(-708) ≈ 3.3e-308 is still a normal double
_UNDERFLOW_VALUE = float(np.exp(-UNDERFLOW_EXPONENT))


@dataclass(frozen=True)
class ResponseLayout:
    """Responses grouped by model: the index structure every kernel sum shares.

    Attributes
    ----------
    model_idx : ndarray of shape (n_responses,)
        Model of each response, non-decreasing (responses sorted by model).
    query_idx : ndarray of shape (n_responses,)
        Unique-query index of each response (queries are keyed by (task, query_id)).
    n_models, n_queries : int
    model_bounds : ndarray of shape (n_models + 1,)
        Responses of model ``i`` are ``model_bounds[i]:model_bounds[i + 1]``.
    """

    model_idx: np.ndarray
    query_idx: np.ndarray
    n_models: int
    n_queries: int
    model_bounds: np.ndarray

    @classmethod
    def build(cls, model_idx: np.ndarray, query_idx: np.ndarray, n_models: int, n_queries: int):
        model_idx = np.asarray(model_idx, dtype=np.int64)
        query_idx = np.asarray(query_idx, dtype=np.int64)
        if np.any(np.diff(model_idx) < 0):
            raise ValueError("responses must be sorted by model (model_idx non-decreasing)")
        counts = np.bincount(model_idx, minlength=n_models)
        if np.any(counts == 0):
            raise ValueError("every model needs at least one response")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        pair_keys = model_idx * max(int(n_queries), 1) + query_idx
        if np.unique(pair_keys).size != pair_keys.size:
            raise ValueError("a model answers each unique query at most once")
        return cls(model_idx, query_idx, int(n_models), int(n_queries), bounds)

    @property
    def n_responses(self) -> int:
        return int(self.model_idx.size)

    @property
    def responses_per_model(self) -> np.ndarray:
        return np.diff(self.model_bounds)


@dataclass(frozen=True)
class KernelSums:
    """Numerator and denominator of Eq. (1), with the self-pair (j = l) parts of the diagonal.

    ``numerator[i, i']`` = Σ kQ kR and ``denominator[i, i']`` = Σ kQ over all response pairs of
    models i and i'; ``self_numerator[i]`` = Σ_j kQ(u_j, u_j) kR(x_ij, x_ij) and
    ``self_denominator[i]`` = Σ_j kQ(u_j, u_j) are the terms pairing a response with itself.
    """

    numerator: np.ndarray
    denominator: np.ndarray
    self_numerator: np.ndarray
    self_denominator: np.ndarray

    @classmethod
    def symmetrised(cls, numerator, denominator, self_numerator, self_denominator):
        """The sums from an N and a Z that are symmetric but for rounding (their means
        with their transposes are kept)."""
        return cls(
            0.5 * (numerator + numerator.T),
            0.5 * (denominator + denominator.T),
            self_numerator,
            self_denominator,
        )


def squared_distances(
    a: np.ndarray, b: np.ndarray | None = None, *, pool: WorkerPool | None = None
) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``a`` and ``b`` (clipped at 0).

    One matrix product of the augmented rows ``[-2a, |a|², 1]`` and ``[b, 1, |b|²]``
    writes ``|a|² + |b|² − 2⟨a, b⟩`` directly: no full-size temporaries or extra passes.
    Large products run on ``pool``'s threads when one is given.
    """
    b_is_a = b is None
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    sq_a = np.einsum("ij,ij->i", a, a)
    sq_b = sq_a if b_is_a else np.einsum("ij,ij->i", b, b)
    left = np.empty((len(a), a.shape[1] + 2))
    np.multiply(a, -2.0, out=left[:, :-2])
    left[:, -2] = sq_a
    left[:, -1] = 1.0
    right = np.empty((len(b), b.shape[1] + 2))
    right[:, :-2] = b
    right[:, -2] = 1.0
    right[:, -1] = sq_b
    if pool is not None and left.shape[0] * right.shape[0] > 1 << 16:
        out = pool.matmul(left, right.T)
    else:
        out = left @ right.T
    np.maximum(out, 0.0, out=out)
    if b_is_a:
        np.fill_diagonal(out, 0.0)
    return out


def rbf_from_squared(
    sq: np.ndarray,
    bandwidth: float,
    out: np.ndarray | None = None,
    *,
    pool: WorkerPool | None = None,
) -> np.ndarray:
    """``exp(-sq / (2 bandwidth^2))``; bandwidth 0 is the delta limit (1 where sq == 0).

    Large matrices are done in row chunks on ``pool``'s threads when one is given (numpy's
    elementwise loops release the GIL). ``out`` (same shape, float) is written and
    returned if given.
    """
    if bandwidth <= 0:
        return (sq == 0).astype(float)
    scale = -1.0 / (2.0 * bandwidth * bandwidth)
    if out is None:
        out = np.empty(sq.shape)
    threads = pool.threads if pool is not None else 1
    if sq.ndim != 2 or sq.size < PARALLEL_MIN_ENTRIES or len(sq) < 2 or threads <= 1:
        _rbf_rows(sq, scale, out)
        return out
    edges = np.linspace(0, len(sq), 2 * threads + 1).astype(int)
    pool.map(
        lambda i: _rbf_rows(sq[edges[i] : edges[i + 1]], scale, out[edges[i] : edges[i + 1]]),
        range(len(edges) - 1),
    )
    return out


def _rbf_rows(sq: np.ndarray, scale: float, out: np.ndarray) -> None:
    np.multiply(sq, scale, out=out)
    # exp(-708) is about the smallest normal double; below it the values are subnormal,
    # and subnormal operands slow matrix products by an order of magnitude. They are set
    # to 0: each is < 3.3e-308, so a kernel sum over m·m' pairs changes by < m·m'·3.3e-308.
    if out.size and out.min() < -UNDERFLOW_EXPONENT:
        np.maximum(out, -UNDERFLOW_EXPONENT, out=out)
        np.exp(out, out=out)
        out[out <= _UNDERFLOW_VALUE] = 0.0
    else:
        np.exp(out, out=out)


def truncated_rbf(sq: np.ndarray, bandwidth: float, cutoff: float):
    """The RBF kernel of the squared distances ``sq`` without its entries at squared
    distance above ``cutoff`` (the sparse path), as a CSR matrix: found from the
    distances, so the dense kernel is never made."""
    rows, cols = np.nonzero(sq <= cutoff)  # row-major order: the CSR layout as it comes
    values = np.exp(sq[rows, cols] * (-1.0 / (2.0 * bandwidth * bandwidth)))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=sq.shape[0]))])
    return sp.csr_array((values, cols, indptr), shape=sq.shape)


def query_kernel_matrix(
    query_sqdist: np.ndarray | None, bandwidth: float, *, pool: WorkerPool | None = None
) -> np.ndarray | None:
    """The query kernel over unique queries; ``None`` stands for the delta kernel.

    The delta kernel compares query *identities*, so two distinct query ids never match
    even if their embeddings coincide; bandwidth 0 therefore maps to ``None``.
    """
    if bandwidth <= 0 or query_sqdist is None:
        return None
    return rbf_from_squared(query_sqdist, bandwidth, pool=pool)


def self_sums(
    layout: ResponseLayout, features: np.ndarray, response_kernel: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per model, the self-pair terms Σ_j kQ(u_j, u_j) kR(x_j, x_j) and Σ_j kQ(u_j, u_j).

    kQ(u, u) = 1 for RBF and delta; kR(x, x) = 1 for an RBF response kernel, else ‖x‖²
    (rows already normalised for cosine).
    """
    if response_kernel == "rbf":
        self_kernel = np.ones(layout.n_responses)
    else:
        self_kernel = np.einsum("ij,ij->i", features, features)
    per_model_r = np.bincount(layout.model_idx, weights=self_kernel, minlength=layout.n_models)
    return per_model_r, layout.responses_per_model.astype(float)


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Unit-normalise rows; all-zero rows stay zero."""
    features = np.asarray(features, dtype=float)
    if features.ndim != 2:
        norms = np.linalg.norm(features, axis=1, keepdims=True)
        return features / np.where(norms > 0, norms, 1.0)
    # the row norms by one pass of products (half the time of linalg.norm on a cache)
    norms = np.sqrt(np.einsum("ij,ij->i", features, features))[:, None]
    return features / np.where(norms > 0, norms, 1.0)


def linear_form(features: np.ndarray, response_kernel: str) -> tuple[np.ndarray, str]:
    """``(features, response_kernel)`` with the cosine kernel written as the linear kernel
    on unit rows (the form every sum works with); other kernels as given."""
    features = np.ascontiguousarray(features, dtype=float)
    if response_kernel == "cosine":
        return normalize_rows(features), "linear"
    return features, response_kernel


def restore_self_pairs(
    numerator: np.ndarray,
    denominator: np.ndarray,
    layout: ResponseLayout,
    features: np.ndarray,
    factor: np.ndarray,
) -> None:
    """Make every self pair of the sums of a low-rank query kernel ``Φ Φ^T`` exact, in place.

    The pair of a response with itself has kQ = 1 exactly, ``Φ Φ^T`` only ``‖φ_q‖²``; adding
    ``(1 − ‖φ_q‖²) ‖x‖²`` to the numerator and ``1 − ‖φ_q‖²`` to the denominator of each
    response's model on the diagonal restores them (the Nyström path's diagonal fix).
    """
    correction = (1.0 - np.einsum("ij,ij->i", factor, factor))[layout.query_idx]
    sq_norms = np.einsum("ij,ij->i", features, features)
    n = layout.n_models
    diag = np.arange(n)
    numerator[diag, diag] += np.bincount(layout.model_idx, correction * sq_norms, minlength=n)
    denominator[diag, diag] += np.bincount(layout.model_idx, correction, minlength=n)


def response_kernel_block(
    x_rows: np.ndarray,
    x_cols: np.ndarray,
    response_kernel: str,
    response_bandwidth: float,
    sq_rows: np.ndarray | None = None,
    sq_cols: np.ndarray | None = None,
) -> np.ndarray:
    """``k_R`` between two blocks of responses: the Gram matrix (linear, or cosine on unit
    rows), or the RBF kernel through :func:`rbf_from_squared` (its subnormal clamp
    included). ``sq_rows`` / ``sq_cols``: the rows' squared norms, when already known."""
    gram = x_rows @ x_cols.T
    if response_kernel != "rbf":
        return gram
    if sq_rows is None:
        sq_rows = np.einsum("ij,ij->i", x_rows, x_rows)
    if sq_cols is None:
        sq_cols = np.einsum("ij,ij->i", x_cols, x_cols)
    gram *= -2.0
    gram += sq_rows[:, None]
    gram += sq_cols[None, :]
    np.maximum(gram, 0.0, out=gram)
    return rbf_from_squared(gram, response_bandwidth, out=gram)


def affinity_from_sums(
    sums: KernelSums, self_pairs: str = "include"
) -> tuple[np.ndarray, np.ndarray]:
    """The affinity A of Eq. (1) from kernel sums.

    Parameters
    ----------
    sums : KernelSums
    self_pairs : {"include", "exclude"}
        ``"include"`` is Eq. (1) as written (a V-statistic: A_ii pairs each response with
        itself). ``"exclude"`` drops the j = l terms from A_ii (a U-statistic, as in unbiased
        MMD). Where a model has (next to) no other kernel mass on its own diagonal (one
        response; the delta kernel, where every within-model pair is a self pair; or a
        bandwidth so narrow that the rest is below ``SELF_PAIR_MIN_MASS`` of the total) the
        excluded estimate is undefined or numerically meaningless and the included one is
        kept. The excluded diagonal also lacks the pairs of one query with itself that the
        cross terms have when models share queries (a paired cache under a narrow query
        kernel); where that leaves more than half of the model pairs with D² < 0, Eq. (1) as
        written is kept for every model.

    Returns
    -------
    affinity : ndarray of shape (n_models, n_models)
        NaN where two models share no kernel mass (e.g. no common query under delta).
    fallback : ndarray of bool, shape (n_models,)
        Models whose diagonal kept the self pairs although ``"exclude"`` was asked.
    """
    if self_pairs not in ("include", "exclude"):
        raise ValueError(f"self_pairs must be 'include' or 'exclude', got {self_pairs!r}")
    numerator = sums.numerator.copy()
    denominator = sums.denominator.copy()
    n = numerator.shape[0]
    fallback = np.zeros(n, dtype=bool)
    if self_pairs == "exclude":
        diag = np.arange(n)
        rest_den = denominator[diag, diag] - sums.self_denominator
        usable = rest_den > SELF_PAIR_MIN_MASS * np.maximum(denominator[diag, diag], 1.0)
        fallback = ~usable
        numerator[diag[usable], diag[usable]] -= sums.self_numerator[usable]
        denominator[diag[usable], diag[usable]] = rest_den[usable]
    with np.errstate(invalid="ignore", divide="ignore"):
        affinity = np.where(
            denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan
        )
    if self_pairs == "exclude" and usable.any() and _mostly_negative(affinity):
        affinity, _ = affinity_from_sums(sums, "include")
        fallback = np.ones(n, dtype=bool)
    return affinity, fallback


def _mostly_negative(affinity: np.ndarray) -> bool:
    """More than :data:`NEGATIVE_SHARE_LIMIT` of the model pairs with D² < 0."""
    diag = np.diag(affinity)
    squared = diag[:, None] + diag[None, :] - 2.0 * affinity
    off = squared[np.triu_indices_from(squared, 1)]
    off = off[np.isfinite(off)]
    return bool(len(off)) and float(np.mean(off < 0)) > NEGATIVE_SHARE_LIMIT


def distance_from_affinity(affinity: np.ndarray) -> tuple[np.ndarray, int]:
    """D with D²_ii' = A_ii + A_i'i' − 2 A_ii', clipped at 0.

    Model pairs without kernel mass (NaN affinity) have no measured distance; they are set
    to the largest measured distance (treated as far apart) and counted.

    Returns
    -------
    distance : ndarray of shape (n_models, n_models)
    n_undefined_pairs : int
    """
    diag = np.diag(affinity)
    squared = diag[:, None] + diag[None, :] - 2.0 * affinity
    np.fill_diagonal(squared, 0.0)
    undefined = np.isnan(squared)
    n_undefined = int(undefined[np.triu_indices_from(undefined, 1)].sum())
    if n_undefined:
        finite = squared[~undefined]
        fill = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        squared = np.where(undefined, fill, squared)
        np.fill_diagonal(squared, 0.0)
    np.maximum(squared, 0.0, out=squared)
    distance = np.sqrt(squared)
    distance = 0.5 * (distance + distance.T)
    return distance, n_undefined


def distance_bound(
    sums: KernelSums,
    numerator_error: np.ndarray,
    denominator_error: np.ndarray,
    self_pairs: str = "include",
    *,
    one_sided: bool = False,
) -> float:
    """Bound on max |ΔD| / max D given bounds on the errors of the kernel sums.

    ``|N − Ñ| ≤ numerator_error`` and ``|Z − Z̃| ≤ denominator_error`` entrywise (with
    ``Z ≥ Z̃`` when ``one_sided``) give ``|A − Ã| ≤ (ΔN + |Ã| ΔZ) / (Z̃ − ΔZ)`` (``/ Z̃``
    when one-sided), then ``β_ii' = b_ii + b_i'i' + 2 b_ii'`` bounds the change of D²_ii'
    and ``|ΔD_ii'| ≤ min(√β, β / D̃_ii')``. Infinite where a pair's kept mass cannot
    cover its error.
    """
    n = sums.numerator.shape[0]
    affinity, fallback = affinity_from_sums(sums, self_pairs)
    kept = sums.denominator.copy()
    if self_pairs == "exclude":
        diag = np.arange(n)
        use = ~fallback
        kept[diag[use], diag[use]] -= sums.self_denominator[use]
    if not one_sided:
        kept = kept - denominator_error
    if not np.all(kept > 0):
        return float("inf")
    per_pair = (numerator_error + np.abs(affinity) * denominator_error) / kept
    diag = np.diag(per_pair)
    beta = diag[:, None] + diag[None, :] + 2.0 * per_pair
    distance = distance_from_affinity(affinity)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.minimum(np.sqrt(beta), np.where(distance > 0, beta / distance, np.inf))
    off = ~np.eye(n, dtype=bool)
    scale = distance[off].max() if n > 1 else 0.0
    if scale <= 0:
        return float("inf")
    return float(change[off].max() / scale)


def truncation_bound(
    layout: ResponseLayout,
    features: np.ndarray,
    sums: KernelSums,
    threshold: float,
    self_pairs: str = "include",
) -> float:
    """Bound on max |ΔD| / max D from dropping query-kernel entries below ``threshold``.

    Each of the m_i m_i' pairs loses less than ``threshold`` of kernel mass and less
    than ``threshold · |<x, x'>|`` of product (:mod:`pkps_core.space.affinity`,
    ``sparse``); ``sums`` are those of the truncated kernel, whose Z only underestimates
    the true one.
    """
    counts = layout.responses_per_model.astype(float)
    norms = np.sqrt(np.einsum("ij,ij->i", features, features))
    mass = np.bincount(layout.model_idx, norms, minlength=layout.n_models)
    return distance_bound(
        sums,
        threshold * np.outer(mass, mass),
        threshold * np.outer(counts, counts),
        self_pairs,
        one_sided=True,
    )


def nystrom_bound(
    layout: ResponseLayout,
    features: np.ndarray,
    sums: KernelSums,
    factor: np.ndarray,
    self_pairs: str = "include",
) -> float:
    """Bound on max |ΔD| / max D of the sums of a Nyström query kernel ``Φ Φ^T`` with
    the exact diagonal restored (:mod:`pkps_core.space.affinity`, ``nystrom``).

    The residual ``E = K_Q − Φ Φ^T`` is positive semi-definite, and so is ``E ⊙ X X^T``;
    with ``e_q = E_qq`` and ``t_i = Σ_j e_{q_ij}``, ``u_i = Σ_j e_{q_ij} ‖x_ij‖²``,
    Cauchy–Schwarz and ``1^T B 1 ≤ m tr B`` give ``|ΔZ_ii'| ≤ √(m_i t_i m_i' t_i')`` and
    ``|ΔN_ii'| ≤ √(m_i u_i m_i' u_i')`` (the exact self pairs only shrink the diagonal's
    error). Infinite when rounding made some ``e_q`` clearly negative.
    """
    residual = 1.0 - np.einsum("ij,ij->i", factor, factor)
    if residual.min() < -1e-9:
        return float("inf")
    residual = np.maximum(residual, 0.0)[layout.query_idx]
    counts = layout.responses_per_model.astype(float)
    sq_norms = np.einsum("ij,ij->i", features, features)
    t = counts * np.bincount(layout.model_idx, residual, minlength=layout.n_models)
    u = counts * np.bincount(layout.model_idx, residual * sq_norms, minlength=layout.n_models)
    return distance_bound(sums, np.sqrt(np.outer(u, u)), np.sqrt(np.outer(t, t)), self_pairs)


def query_kernel_matrices(
    query_vectors: np.ndarray | None, bandwidths: np.ndarray
) -> list[np.ndarray | None]:
    """The query kernel ``kQ(u_q, u_q')`` at each bandwidth, (n_queries, n_queries) each;
    None for the delta kernel (no query vectors, or bandwidth 0: ``[q == q']``)."""
    if query_vectors is None:
        return [None] * len(bandwidths)
    squared = squared_distances(query_vectors)
    return [
        None if sigma <= 0 else rbf_from_squared(squared, float(sigma))
        for sigma in np.asarray(bandwidths, dtype=float)
    ]
