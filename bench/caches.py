"""Benchmark caches at fixed sizes and seeds (issue: performance without a query cap).

Sizes are (models, tasks, queries per cell) with 64-d query and 92-d response embeddings.
``paired``: every model answers the same queries of each task (pool = queries per cell),
as in HELM's 120-query tasks. ``unpaired``: each model samples its own queries from a
pool four times larger, so two models share about a quarter of them (rho ≈ 0.25).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SIZES = {
    "S": (45, 16, 4),
    "M": (45, 16, 32),
    "L": (93, 18, 120),
    "XL": (200, 30, 120),
}
QUERY_DIM, RESPONSE_DIM, LATENT = 64, 92, 8


def make_bench_records(size: str, pairing: str = "paired", seed: int = 0, extra_models: int = 0):
    """Canonical records of a benchmark cache (plus ``extra_models`` held back for updates).

    Returns
    -------
    records : DataFrame with query_embedding / response_embedding columns
    """
    n_models, n_tasks, per_cell = SIZES[size]
    return make_sized_records(n_models + extra_models, n_tasks, per_cell, pairing, seed)


def make_sized_records(
    n_models: int, n_tasks: int, per_cell: int, pairing: str = "paired", seed: int = 0
):
    """:func:`make_bench_records` at any size (models, tasks, queries per cell)."""
    pool = per_cell if pairing == "paired" else 4 * per_cell
    rng = np.random.default_rng(seed)
    task_centres = rng.standard_normal((n_tasks, LATENT))
    queries = task_centres[:, None, :] + 0.5 * rng.standard_normal((n_tasks, pool, LATENT))
    ability = np.repeat(rng.standard_normal((n_models // 3 + 1, LATENT)), 3, axis=0)[:n_models]
    ability = ability + 0.5 * rng.standard_normal((n_models, LATENT))
    query_map = rng.standard_normal((LATENT, QUERY_DIM)) / np.sqrt(LATENT)
    answer_map = rng.standard_normal((LATENT, RESPONSE_DIM)) / np.sqrt(LATENT)
    if pairing == "paired":
        chosen = np.broadcast_to(np.arange(per_cell), (n_models, n_tasks, per_cell))
    else:
        chosen = np.argsort(rng.random((n_models, n_tasks, pool)), axis=2)[:, :, :per_cell]
        chosen = np.sort(chosen, axis=2)
    model_idx = np.repeat(np.arange(n_models), n_tasks * per_cell)
    task_idx = np.tile(np.repeat(np.arange(n_tasks), per_cell), n_models)
    query_idx = chosen.reshape(-1)
    u = queries[task_idx, query_idx]
    v = ability[model_idx]
    logits = 2.0 * np.einsum("rd,rd->r", v, u) / np.sqrt(LATENT)
    scores = (rng.random(len(u)) < 1 / (1 + np.exp(-logits))).astype(float)
    responses = (v * u) @ answer_map + 0.5 * rng.standard_normal((len(u), RESPONSE_DIM))
    query_vectors = u @ query_map
    width = len(str(n_models))
    return pd.DataFrame(
        {
            "model": [f"f{i // 3:03d}/m{i:0{width}d}" for i in model_idx],
            "task": [f"t{t:02d}" for t in task_idx],
            "query_id": [f"q{q:04d}" for q in query_idx],
            "score": scores,
            "query_embedding": list(query_vectors),
            "response_embedding": list(responses),
        }
    )


def make_text_records(n_models: int, n_tasks: int, per_task: int, pool: int, seed: int = 0):
    """A text cache without embeddings, as an upload gives it: ``n_models × n_tasks ×
    per_task`` rows, each model answering ``per_task`` of ``pool`` queries per task (about
    ``n_models·per_task/pool`` models share a query), short texts and 0/1 scores.

    The browser test's million-row upload (``tests/browser/test_reliability.py``) and
    ``bench/ingest_speed.py`` read the same rows.
    """
    rng = np.random.default_rng(seed)
    cells = n_models * n_tasks
    models = np.repeat(np.arange(n_models), n_tasks * per_task)
    tasks = np.tile(np.repeat(np.arange(n_tasks), per_task), n_models)
    queries = np.concatenate([rng.choice(pool, per_task, replace=False) for _ in range(cells)])
    correct = rng.random(len(queries)) < 0.6
    # each distinct text made once and picked by index (a million f-strings took 3 s)
    model_names = np.array([f"fam{m % 20:02d}/m{m:04d}" for m in range(n_models)], dtype=object)
    task_names = np.array([f"task{t}" for t in range(n_tasks)], dtype=object)
    query_ids = np.array([str(q) for q in range(pool)], dtype=object)
    texts = np.array(
        [f"task{t} question {q}" for t in range(n_tasks) for q in range(pool)], dtype=object
    )
    return pd.DataFrame(
        {
            "model": model_names[models],
            "task": task_names[tasks],
            "query_id": query_ids[queries],
            "query": texts[tasks * pool + queries],
            "response": np.where(correct, "the right answer", "a wrong answer"),
            "score": correct.astype(float),
        }
    )
