"""The synthetic generator: reproducible, and its levers do what they say."""

import numpy as np
import pytest

from pkps_core.records import validate_records
from pkps_core.synthetic import make_synthetic


def test_same_seed_same_cache():
    a = make_synthetic(n_models=10, n_tasks=3, budget=2, random_state=5)
    b = make_synthetic(n_models=10, n_tasks=3, budget=2, random_state=5)
    c = make_synthetic(n_models=10, n_tasks=3, budget=2, random_state=6)
    assert a.records[["model", "task", "query_id", "score"]].equals(
        b.records[["model", "task", "query_id", "score"]]
    )
    assert not np.allclose(a.truth.true_score, c.truth.true_score)


def test_records_are_canonical_with_paper_dimensions():
    cache = make_synthetic(n_models=8, n_tasks=2, budget=3, random_state=0)
    frame = validate_records(cache.records, require_scores=True)
    assert len(frame) == 8 * 2 * 3
    assert len(frame.response_embedding.iloc[0]) == 20  # observed embedding dimension
    assert len(frame.query_embedding.iloc[0]) == 20
    assert set(frame.score.unique()) <= {0.0, 1.0}
    cells = frame.groupby(["model", "task"]).reference_score.first().reset_index()
    merged = cells.merge(cache.truth, on=["model", "task"])
    np.testing.assert_allclose(merged.reference_score, merged.true_score)


@pytest.mark.parametrize("rho,budget", [(0.0, 4), (0.25, 4), (0.5, 4), (1.0, 4)])
def test_pairing_fraction(rho, budget):
    cache = make_synthetic(n_models=6, n_tasks=2, budget=budget, rho=rho, random_state=1)
    r = cache.records
    sets = {k: set(g.query_id) for k, g in r.groupby(["model", "task"])}
    models = sorted(r.model.unique())
    for t in r.task.unique():
        for a in models:
            for b in models:
                if a != b:
                    assert len(sets[(a, t)] & sets[(b, t)]) / budget == pytest.approx(rho)


def test_task_coverage_and_query_depth():
    cache = make_synthetic(
        n_models=40, n_tasks=10, budget=8, p_task=0.3, p_query=0.5, random_state=2
    )
    observed = cache.truth.observed.mean()
    assert 0.2 < observed < 0.45
    per_cell = cache.records.groupby(["model", "task"]).size()
    assert 3.0 < per_cell.mean() < 5.0  # about p_query * budget kept
    assert cache.records.groupby("model").task.nunique().min() >= 1


def test_true_scores_track_model_ability():
    # cell truth is a pool mean, so it lies in [0, 1] and varies across models
    cache = make_synthetic(random_state=3)
    truth = cache.truth.true_score
    assert truth.between(0, 1).all() and truth.std() > 0.1
