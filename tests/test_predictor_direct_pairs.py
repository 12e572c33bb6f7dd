"""A few new models' pair sums straight from their responses equal the factored pass's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pkps_core.predictor import ReferencePredictor, direct_pairs
from pkps_core.predictor.shadow_sums import shadow_pair_sums
from pkps_core.space import kernels
from pkps_core.space.prepare import prepare_cache
from pkps_core.synthetic import make_synthetic

NEW = ["fam0/model-01", "fam1/model-05", "fam3/model-14"]


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    return make_synthetic(
        n_models=16, n_tasks=3, budget=12, rho=1.0, random_state=7, family_size=4
    ).records


@pytest.fixture(scope="module")
def thin_and_dense(records):
    """Dense references, two thin references (3 per task) and three thin new models (2 per
    task, one of them answering one task only)."""
    models = sorted(records["model"].unique())
    assert set(NEW) <= set(models)
    thin_refs = [m for m in models if m not in NEW][:2]
    parts = [records[~records["model"].isin(NEW + thin_refs)]]
    parts.append(records[records["model"].isin(thin_refs)].groupby(["model", "task"]).head(3))
    new = records[records["model"].isin(NEW)].groupby(["model", "task"]).head(2)
    new = new[(new["model"] != NEW[2]) | (new["task"] == new["task"].min())]
    prepared = prepare_cache(pd.concat([*parts, new], ignore_index=True), validated=False)
    is_new = np.isin(prepared.models, NEW)
    features = kernels.normalize_rows(prepared.response_vectors)
    queries = prepared.query_vectors.copy()
    queries[3] = queries[2]  # a duplicated query: kernel 1 off the diagonal
    median = float(np.median(np.sqrt(kernels.squared_distances(queries))))
    return prepared, is_new, features, queries, [0.0, 0.05 * median, median, 3 * median]


@pytest.mark.parametrize("delta_only", [False, True])
def test_direct_sums_equal_the_factored_pass(thin_and_dense, delta_only):
    prepared, is_new, features, queries, grid = thin_and_dense
    queries = None if delta_only else queries
    layout = prepared.layout
    direct = direct_pairs.direct_pair_sums(layout, features, queries, grid, is_new, ~is_new)
    factored = shadow_pair_sums(layout, features, queries, grid, is_new, rows=~is_new)
    assert direct is not None and len(direct) == len(factored) == len(grid)
    for (num, den), (num0, den0) in zip(direct, factored, strict=True):
        assert num.shape == num0.shape == (len(prepared.models), is_new.sum())
        np.testing.assert_allclose(num, num0, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(den, den0, rtol=1e-10, atol=1e-12)
        assert (den[~is_new] > 0).any()  # the sums are not all zero
    if not delta_only:  # the kernel's width matters
        assert np.abs(direct[1][0] - direct[3][0]).max() > 1e-3


def test_too_many_pairs_go_to_the_factored_pass(thin_and_dense, monkeypatch):
    prepared, is_new, features, queries, grid = thin_and_dense
    monkeypatch.setattr(direct_pairs, "DIRECT_MAX_PAIRS", 10)
    assert (
        direct_pairs.direct_pair_sums(prepared.layout, features, queries, grid, is_new, ~is_new)
        is None
    )


def test_a_placement_predicts_the_same_by_either_path(records, monkeypatch):
    references = records[~records["model"].isin(NEW)]
    new = records[records["model"].isin(NEW)].groupby(["model", "task"]).head(2)
    predictor = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(references)
    calls = []
    counted = direct_pairs.direct_pair_sums
    monkeypatch.setattr(
        "pkps_core.predictor.placement.direct_pair_sums",
        lambda *a: calls.append(counted(*a) is not None) or counted(*a),
    )
    direct = predictor.predict(new)
    assert calls and all(calls)
    monkeypatch.setattr(direct_pairs, "DIRECT_MAX_PAIRS", -1)
    factored = predictor.predict(new)
    assert calls[-1] is False
    np.testing.assert_allclose(direct["prediction"], factored["prediction"], rtol=0, atol=1e-9)
    assert direct["prediction"].notna().all()
