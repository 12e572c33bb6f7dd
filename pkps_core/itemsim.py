"""Item-level binary simulators: a 2PL item bank and a canonical cache built from item banks.

:func:`make_2pl` draws a models × items matrix of 0/1 outcomes from a two-parameter logistic
(2PL) item-response model with a spread of abilities (the input of
:func:`pkps_core.protocols.estimation_gap_study`). :func:`make_item_cache` turns a Rasch item
bank per task into canonical records with a mix of fully and sparsely evaluated models, for
end-to-end tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pkps_core.synthetic import SyntheticCache


@dataclass(frozen=True)
class ItemBank:
    """A simulated 2PL item bank.

    Attributes
    ----------
    scores : ndarray (n_models, n_items) of float 0/1
        Realised outcomes s(f, z).
    probabilities : ndarray (n_models, n_items)
        ``sigmoid(a_z (theta_f − b_z))``.
    abilities, difficulties, discriminations : ndarray
        theta_f, b_z and a_z.
    """

    scores: np.ndarray
    probabilities: np.ndarray
    abilities: np.ndarray
    difficulties: np.ndarray
    discriminations: np.ndarray


def make_2pl(
    n_models: int = 80,
    n_items: int = 500,
    *,
    ability_spread: float = 1.5,
    difficulty_spread: float = 2.0,
    discrimination: float = 2.0,
    discrimination_spread: float = 0.3,
    random_state: int | None = 0,
) -> ItemBank:
    """Draw a 2PL item bank: ``P(s = 1) = sigmoid(a_z (theta_f − b_z))``.

    Parameters
    ----------
    n_models, n_items : int
        Models f and items z (the issue's study: 80 × 500).
    ability_spread : float
        Standard deviation of the abilities theta_f ~ N(0, spread²); difficulties are
        N(0, 1), so a spread above 1 gives weak and strong models (full scores from near 0.1
        to near 0.9), which the extrapolation split needs.
    discrimination_spread : float
        a_z = exp(N(0, spread²)); 0 gives the Rasch (1PL) model.
    random_state : int, optional

    Returns
    -------
    ItemBank
    """
    rng = np.random.default_rng(random_state)
    abilities = ability_spread * rng.standard_normal(n_models)
    difficulties = difficulty_spread * rng.standard_normal(n_items)
    discriminations = discrimination * np.exp(discrimination_spread * rng.standard_normal(n_items))
    logits = discriminations[None, :] * (abilities[:, None] - difficulties[None, :])
    probabilities = 1.0 / (1.0 + np.exp(-logits))
    scores = (rng.random(probabilities.shape) < probabilities).astype(float)
    return ItemBank(scores, probabilities, abilities, difficulties, discriminations)


def make_item_cache(
    n_families: int = 10,
    family_size: int = 3,
    n_tasks: int = 3,
    n_items: int = 60,
    *,
    sparse_fraction: float = 0.5,
    budget: int = 15,
    p_missing: float = 0.2,
    random_state: int | None = 0,
) -> SyntheticCache:
    """Canonical records from a Rasch item bank per task, with full and sparse models.

    Models in families share an ability centre. A random ``sparse_fraction`` of models
    answer only ``budget`` random items per task (independently per model, so unpaired)
    and miss a ``p_missing`` share of their tasks entirely (at least one task kept); the
    others answer every item of every task. Every cell carries its full-task mean as
    ``reference_score``. Query embeddings encode the item's difficulty and task; response
    embeddings the outcome and the model's ability, plus noise — enough for a perspective
    space, so every method of :data:`pkps_core.predict.METHODS` applies somewhere.

    Returns
    -------
    SyntheticCache
        ``records`` (model, task, query_id, score, family, reference_score,
        query_embedding, response_embedding) and ``truth`` (every cell's full-task mean,
        observed or not).
    """
    rng = np.random.default_rng(random_state)
    n_models = n_families * family_size
    family_of = np.arange(n_models) // family_size
    centres = 1.2 * rng.standard_normal(n_families)
    abilities = centres[family_of] + 0.4 * rng.standard_normal(n_models)
    sparse = rng.random(n_models) < sparse_fraction
    dropped = sparse[:, None] & (rng.random((n_models, n_tasks)) < p_missing)
    for i in np.flatnonzero(dropped.all(axis=1)):
        dropped[i, rng.integers(n_tasks)] = False
    rows = []
    truth = []
    for t in range(n_tasks):
        difficulties = rng.standard_normal(n_items)
        shift = rng.normal(0.0, 0.5)
        logits = abilities[:, None] - difficulties[None, :] + shift
        outcomes = (rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))).astype(float)
        item_vectors = np.column_stack(
            [difficulties, np.full(n_items, t), 0.3 * rng.standard_normal((n_items, 4))]
        )
        for i in range(n_models):
            truth.append(
                {
                    "model": f"fam{family_of[i]:02d}/m{i:03d}",
                    "task": f"task-{t}",
                    "family": f"fam{family_of[i]:02d}",
                    "true_score": outcomes[i].mean(),
                    "observed": not dropped[i, t],
                }
            )
            if dropped[i, t]:
                continue
            items = (
                np.sort(rng.choice(n_items, size=budget, replace=False))
                if sparse[i]
                else np.arange(n_items)
            )
            for z in items:
                response = np.concatenate(
                    [
                        [outcomes[i, z], abilities[i], difficulties[z]],
                        0.3 * rng.standard_normal(3),
                    ]
                )
                rows.append(
                    {
                        "model": f"fam{family_of[i]:02d}/m{i:03d}",
                        "task": f"task-{t}",
                        "query_id": f"q{z:04d}",
                        "score": outcomes[i, z],
                        "family": f"fam{family_of[i]:02d}",
                        "reference_score": outcomes[i].mean(),
                        "query_embedding": item_vectors[z],
                        "response_embedding": response,
                    }
                )
    return SyntheticCache(records=pd.DataFrame(rows), truth=pd.DataFrame(truth))
