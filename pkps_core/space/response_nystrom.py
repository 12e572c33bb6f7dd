"""The RBF response kernel on the factorised path: Nyström features of the responses.

The RBF response kernel ``k_R(x, x') = exp(−‖x − x'‖² / 2σ_R²)`` does not factorise, so the
exact sums of Eq. (1) visit every pair of responses, O(N² p) per query bandwidth (32k
unpaired responses: minutes for a cross-validated fit; a (nearly) paired cache takes one
exact pass for the whole grid instead, :mod:`~pkps_core.space.paired_sums`: AlpacaEval-40's
fit 4.56 s, 5.0× linear, ``docs/results/app-speed.md``). With ``r`` seeded landmark
responses ``L``, ``φ(x) = k_R(x, L) U Λ^{-1/2}`` (``K_LL = U Λ U^T``) gives
``k_R ≈ Φ Φ^T``, a *linear* kernel on ``Φ``; the sums then run on the factorised path
(and its sparse / Nyström query paths), O(M N r) plus O(N r p) for the features.

Exact self pairs: ``k_R(x, x) = 1`` while ``‖φ(x)‖² = 1 − e_x`` with ``e_x ≥ 0`` the
residual's diagonal; since ``k_Q(u, u) = 1`` for both query kernels, adding ``Σ_j e_j`` of
each model to its diagonal numerator (and self-pair sum) makes every self pair exact.

Bound: the residual ``E_R = K_R − Φ Φ^T`` is positive semi-definite (Nyström), and so is
``K_Q ⊙ E_R`` (Schur product theorem). For a PSD matrix ``M`` and index sets of sizes
``m_i, m_i'``, ``|1_i^T M 1_i'| ≤ √(1_i^T M 1_i · 1_i'^T M 1_i')`` and
``1_i^T M 1_i ≤ m_i tr M_ii``, so with ``t_i = Σ_{j ∈ i} e_j``::

    |ΔN_ii'| ≤ √(m_i t_i m_i' t_i'),   ΔZ = 0

(the diagonal's correction only removes part of that error). The engine turns this into a
bound on max |ΔD| / max D (:func:`~pkps_core.space.kernels.distance_bound`); where the bound is too
loose, D is recomputed exactly on a seeded sample of models and compared. The rank doubles
until one of them is within ``tol``, else the exact pairwise path runs.

Opt-in (``affinity_method="nystrom"``), because it did not pay on real data: on AlpacaEval
(32k responses, 128-d TF-IDF + SVD features) no rank up to 2048 came within tol = 1e-3 at
any grid bandwidth, so "auto" would have paid for the attempts and then the exact path
(`bench/rbf_response.py`, before the paired pass: 655 s against 453 s exact on a loaded
machine, 538 s against 236 s in another run). On smoother features (a synthetic
cache in 48 PCA dimensions) rank 2048 met the tolerance, but no faster than exact.
"""

from __future__ import annotations

import numpy as np

from pkps_core.space import kernels
from pkps_core.space.runtime import WorkerPool
from pkps_core.space.sums import sample_exact_sums

RESPONSE_NYSTROM_MIN = 4096  # fewer responses: the exact pair sum takes well under a second
RESPONSE_RANKS = (256, 512, 1024, 2048)  # tried in turn; more costs about as much as exact
VERIFY_MODELS = 8  # models whose exact sums check a Nyström approximation


def nystrom_factor(
    points: np.ndarray,
    bandwidth: float,
    rank: int,
    *,
    random_state=0,
    pool: WorkerPool | None = None,
) -> np.ndarray:
    """Nyström features ``Φ`` (n × r') of the RBF kernel on ``points`` at ``bandwidth``:
    ``Φ Φ^T ≈ K``, for the queries (the Nyström query path) and the responses alike.

    Landmarks are ``rank`` points drawn without replacement with ``random_state``;
    eigenvalues of ``K_LL`` below ``1e-10`` of the largest are dropped (r' ≤ rank).
    """
    rng = np.random.default_rng(random_state)
    n = len(points)
    landmarks = np.sort(rng.choice(n, size=min(rank, n), replace=False))
    cross = kernels.rbf_from_squared(
        kernels.squared_distances(points, points[landmarks], pool=pool),
        bandwidth,
        pool=pool,
    )
    values, vectors = np.linalg.eigh(cross[landmarks])
    keep = values > 1e-10 * values.max()
    projection = vectors[:, keep] / np.sqrt(values[keep])
    return cross @ projection if pool is None else pool.matmul(cross, projection)


def response_factor(
    features: np.ndarray,
    bandwidth: float,
    rank: int,
    *,
    random_state=0,
    pool: WorkerPool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Nyström features ``Φ`` of the RBF response kernel (:func:`nystrom_factor`) and the
    residual diagonal ``e = 1 − ‖φ‖²`` (clipped at 0; rounding can make it −1e-15)."""
    factor = nystrom_factor(features, bandwidth, rank, random_state=random_state, pool=pool)
    residual = np.maximum(1.0 - np.einsum("ij,ij->i", factor, factor), 0.0)
    return factor, residual


def sampled_error(engine, bandwidth: float, sums: kernels.KernelSums, self_pairs: str) -> float:
    """Max relative error of D on a seeded sample of :data:`VERIFY_MODELS` models of
    ``engine``'s cache, against their exact sums: the check of either Nyström path when
    its bound is too loose."""
    rng = np.random.default_rng(engine.random_state)
    n = engine.layout.n_models
    sample = np.sort(rng.choice(n, size=min(VERIFY_MODELS, n), replace=False))
    exact = sample_exact_sums(
        engine.layout,
        engine.features,
        engine.query_vectors,
        bandwidth,
        sample,
        pool=engine.pool,
        response_kernel=engine.response_kernel,
        response_bandwidth=engine.response_bandwidth,
    )
    approx = kernels.KernelSums(
        sums.numerator[np.ix_(sample, sample)],
        sums.denominator[np.ix_(sample, sample)],
        sums.self_numerator[sample],
        sums.self_denominator[sample],
    )
    d_exact, d_approx = (
        kernels.distance_from_affinity(kernels.affinity_from_sums(s, self_pairs)[0])[0]
        for s in (exact, approx)
    )
    scale = np.abs(d_exact[np.triu_indices(len(sample), 1)]).max()
    if scale == 0:
        return 0.0
    return float(np.abs(d_approx - d_exact).max() / scale)


def exact_self_pairs(sums: kernels.KernelSums, layout, residual: np.ndarray) -> kernels.KernelSums:
    """The sums of ``Φ`` with every self pair's ``k_R(x, x) = 1`` restored (module docstring)."""
    missing = np.bincount(layout.model_idx, residual, minlength=layout.n_models)
    numerator = sums.numerator.copy()
    idx = np.arange(layout.n_models)
    numerator[idx, idx] += missing
    return kernels.KernelSums(
        numerator, sums.denominator, sums.self_numerator + missing, sums.self_denominator
    )


def numerator_error(layout, residual: np.ndarray) -> np.ndarray:
    """Entrywise bound on ``|ΔN|`` from the residual diagonal: ``√(m_i t_i m_i' t_i')``."""
    counts = layout.responses_per_model.astype(float)
    mass = counts * np.bincount(layout.model_idx, residual, minlength=layout.n_models)
    return np.sqrt(np.outer(mass, mass))


def worth_trying(layout, n_features: int, rank: int) -> bool:
    """Whether sums on ``rank`` Nyström features clearly cost less than the exact pair sum.

    The factorised path's transfers cost about ``Q N r`` and its contraction ``M² Q r``
    (``Q`` unique queries, ``N`` responses, ``M`` models), the features ``N r p``; the
    exact pair sum ``N² p``. A rank is tried only at under half the exact cost, so the
    approximation is never the slower way to the same numbers.
    """
    n, q, m = layout.n_responses, layout.n_queries, layout.n_models
    approx = (q * n + m * m * q + n * n_features) * float(rank)
    return approx < 0.5 * float(n) * n * n_features


def _engine_at(engine, rank: int):
    """An engine over the responses' Nyström features at ``rank`` (linear kernel) on a
    backend of the same kind, sharing ``engine``'s threads (and query distances, or
    cluster); and the residual."""
    if rank not in engine._response_engines:
        factor, residual = response_factor(
            engine.features,
            engine.response_bandwidth,
            rank,
            random_state=engine.random_state,
            pool=engine.pool,
        )
        inner = type(engine)(
            engine.layout,
            factor,
            engine.query_vectors,
            affinity_path=engine.affinity_path,
            tol=engine.tol,
            block_bytes=engine.block_bytes,
            random_state=engine.random_state,
            backend=engine.backend.sharing,
        )
        inner.pool = engine.pool
        # one factor kept at a time (with the rank that last served)
        kept = {k: v for k, v in engine._response_engines.items() if k == "rank"}
        engine._response_engines = {**kept, rank: (inner, residual)}
    return engine._response_engines[rank]


def nystrom_sums(engine, bandwidth: float, self_pairs: str):
    """The kernel sums of an RBF-response ``engine`` at one query bandwidth through
    Nyström features, as ``(sums, path, error, error_kind)``; None when no rank of
    :data:`RESPONSE_RANKS` is within the engine's ``tol`` (the caller runs the exact path).

    The error is the response approximation's (bound, else measured on sampled models)
    plus that of the query path the features took.
    """
    layout = engine.layout
    start = engine._response_engines.get("rank", RESPONSE_RANKS[0])  # last rank that served
    for rank in (r for r in RESPONSE_RANKS if r >= start):
        if rank > layout.n_responses // 4 or not worth_trying(
            layout, engine.features.shape[1], rank
        ):
            break
        inner, residual = _engine_at(engine, rank)
        result = exact_self_pairs(inner.sums(bandwidth, self_pairs), layout, residual)
        query = inner.reports[-1]
        error = kernels.distance_bound(
            result,
            numerator_error(layout, residual),
            np.zeros((layout.n_models, layout.n_models)),
            self_pairs,
        )
        kind = "bound" if query.error_kind != "measured" else "measured"
        if error > engine.tol:
            error, kind = sampled_error(engine, bandwidth, result, self_pairs), "measured"
        if error + query.error <= engine.tol:
            query_path = query.path + (f"(r={query.rank})" if query.rank else "")
            path = f"{query_path}+response-nystrom(r={inner.features.shape[1]})"
            engine._response_engines["rank"] = rank
            return result, path, error + query.error, kind
    return None
