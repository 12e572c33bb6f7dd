"""The PKPS paper's synthetic generator (Section 4 "Synthetic data"; appendix "Synthetic study").

Models carry latent ability vectors ``v_i`` and tasks latent centres ``t_k`` in R^5 (latent
dimension 5). Queries are drawn near their task centre, ``u_j = t_k + eta_j``. A model's
chance of answering a query correctly is ``sigmoid(scale * v_i . u_j / sqrt(5) + e_ik)`` with
a cell-level noise ``e_ik``; its per-response score is the realised 0/1 outcome. Responses
are observed as 20-d embeddings (observed dimension 20) of the latent answer ``v_i * u_j``
(element-wise: which abilities the query calls on) plus the correct-answer direction of the
query when the response is correct, with isotropic response noise 0.5.

Every model answers every query of a per-task pool; the observed cache is a subsample
(budget ``m`` per observed cell, pairing ``rho``, task coverage ``p_task``, query depth
``p_query``), and a cell's true score is its mean over the whole pool — the "full-task
score" the papers predict. Models come in families (shared latent centre), named
``family/model`` so the default family rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

LATENT_DIM = 5
OBSERVED_DIM = 20
RESPONSE_NOISE = 0.5


@dataclass(frozen=True)
class SyntheticCache:
    """A generated cache.

    Attributes
    ----------
    records : DataFrame
        Canonical records of the observed responses, with ``query_embedding``,
        ``response_embedding``, ``score``, ``family`` and the cell's true score as
        ``reference_score``.
    truth : DataFrame
        Every (model, task) cell, observed or not: ``model, task, family, true_score,
        observed``.
    """

    records: pd.DataFrame
    truth: pd.DataFrame


def _shared_count(budget: int, rho: float) -> int:
    return int(round(rho * budget))


def make_synthetic(
    n_models: int = 60,
    n_tasks: int = 12,
    budget: int = 4,
    rho: float = 0.0,
    p_task: float = 1.0,
    p_query: float = 1.0,
    *,
    family_size: int = 3,
    family_spread: float = 0.5,
    query_spread: float = 0.5,
    score_scale: float = 2.0,
    cell_noise: float = 0.1,
    pool_size: int | None = None,
    random_state: int | None = 0,
) -> SyntheticCache:
    """Generate a sparse, unpaired cache of embedded responses with known true scores.

    Parameters
    ----------
    n_models, n_tasks : int
        Cohort size n and number of tasks T (paper defaults 60 and 12).
    budget : int
        Queries m per observed (model, task) cell (paper default 4).
    rho : float in [0, 1]
        Pairing: ``round(rho * m)`` of each model's queries in a task come from a pool
        shared by all models; the rest are private to the model (disjoint designs, so
        ``rho_ii' = m_ii' / m``).
    p_task : float in (0, 1]
        Probability that a (model, task) cell is observed. Every model keeps at least one
        task and every task at least two models.
    p_query : float in (0, 1]
        Given an observed cell, probability that each of its m queries is kept (at least
        one is).
    family_size : int
        Models per family; a family's models share a latent centre.
    family_spread, query_spread : float
        Standard deviation of a model around its family centre, and of a query around its
        task centre, in latent units.
    score_scale : float
        Slope of the logit of a correct answer in ``v_i . u_j / sqrt(5)``.
    cell_noise : float
        Standard deviation of the (model, task) logit noise (score noise 0.1 in the paper).
    pool_size : int, optional
        Queries per task pool. Default ``n_models * budget``: enough for disjoint private
        designs at every rho, so the true scores do not depend on the pairing.
    random_state : int, optional
        Seed; the same seed gives the same cache.

    Returns
    -------
    SyntheticCache
    """
    if n_models < 2 or n_tasks < 1 or budget < 1:
        raise ValueError("need n_models >= 2, n_tasks >= 1 and budget >= 1")
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    if not (0.0 < p_task <= 1.0 and 0.0 < p_query <= 1.0):
        raise ValueError("p_task and p_query must be in (0, 1]")
    rng = np.random.default_rng(random_state)
    n_shared = _shared_count(budget, rho)
    n_private = budget - n_shared
    needed = n_shared + n_models * n_private
    pool = max(needed, pool_size if pool_size else n_models * budget)

    n_families = int(np.ceil(n_models / family_size))
    family_centres = rng.standard_normal((n_families, LATENT_DIM))
    family_of = np.arange(n_models) // family_size
    abilities = family_centres[family_of] + family_spread * rng.standard_normal(
        (n_models, LATENT_DIM)
    )
    task_centres = rng.standard_normal((n_tasks, LATENT_DIM))
    queries = task_centres[:, None, :] + query_spread * rng.standard_normal(
        (n_tasks, pool, LATENT_DIM)
    )
    query_map = rng.standard_normal((LATENT_DIM, OBSERVED_DIM)) / np.sqrt(LATENT_DIM)
    answer_map = rng.standard_normal((LATENT_DIM, OBSERVED_DIM)) / np.sqrt(LATENT_DIM)
    correct_map = rng.standard_normal((LATENT_DIM, OBSERVED_DIM)) / np.sqrt(LATENT_DIM)

    cell_offset = cell_noise * rng.standard_normal((n_models, n_tasks))
    logits = (
        score_scale * np.einsum("id,tqd->itq", abilities, queries) / np.sqrt(LATENT_DIM)
        + cell_offset[:, :, None]
    )
    correct = rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))
    true_scores = correct.mean(axis=2)

    observed = rng.random((n_models, n_tasks)) < p_task
    for i in np.flatnonzero(~observed.any(axis=1)):
        observed[i, rng.integers(n_tasks)] = True
    for t in range(n_tasks):
        while observed[:, t].sum() < min(2, n_models):
            observed[rng.integers(n_models), t] = True

    width = len(str(n_models - 1))
    fam_width = len(str(n_families - 1))
    model_names = [f"fam{family_of[i]:0{fam_width}d}/model-{i:0{width}d}" for i in range(n_models)]
    task_names = [f"task-{t:02d}" for t in range(n_tasks)]

    rows_model, rows_task, rows_query = [], [], []
    for t in range(n_tasks):
        order = rng.permutation(pool)
        shared = order[:n_shared]
        private = order[n_shared : n_shared + n_models * n_private].reshape(n_models, n_private)
        for i in range(n_models):
            if not observed[i, t]:
                continue
            chosen = np.concatenate([shared, private[i]])
            keep = rng.random(len(chosen)) < p_query
            if not keep.any():
                keep[rng.integers(len(chosen))] = True
            chosen = np.sort(chosen[keep])
            rows_model.append(np.full(len(chosen), i))
            rows_task.append(np.full(len(chosen), t))
            rows_query.append(chosen)
    model_idx = np.concatenate(rows_model)
    task_idx = np.concatenate(rows_task)
    query_idx = np.concatenate(rows_query)

    u = queries[task_idx, query_idx]
    v = abilities[model_idx]
    s = correct[model_idx, task_idx, query_idx].astype(float)
    response_vectors = (
        (v * u) @ answer_map
        + s[:, None] * (u @ correct_map)
        + RESPONSE_NOISE * rng.standard_normal((len(model_idx), OBSERVED_DIM))
    )
    query_vectors = u @ query_map

    records = pd.DataFrame(
        {
            "model": np.asarray(model_names, dtype=object)[model_idx],
            "task": np.asarray(task_names, dtype=object)[task_idx],
            "query_id": [f"q{q:05d}" for q in query_idx],
            "score": s,
            "family": [model_names[i].split("/")[0] for i in model_idx],
            "reference_score": true_scores[model_idx, task_idx],
            "query_embedding": list(query_vectors),
            "response_embedding": list(response_vectors),
        }
    )
    truth = pd.DataFrame(
        {
            "model": np.repeat(model_names, n_tasks),
            "task": np.tile(task_names, n_models),
            "family": np.repeat([m.split("/")[0] for m in model_names], n_tasks),
            "true_score": true_scores.ravel(),
            "observed": observed.ravel(),
        }
    )
    return SyntheticCache(records=records, truth=truth)
