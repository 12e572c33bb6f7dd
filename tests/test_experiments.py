"""The query-efficiency masking of real caches."""

import numpy as np
import pandas as pd
import pytest

from pkps_core.protocols import subsample_cells


@pytest.fixture(scope="module")
def dense():
    rng = np.random.default_rng(0)
    rows = [
        (f"f{i // 2}/m{i}", f"t{t}", f"q{q}", float(rng.random() < 0.5))
        for i in range(8)
        for t in range(3)
        for q in range(40)
    ]
    return pd.DataFrame(rows, columns=["model", "task", "query_id", "score"])


@pytest.mark.parametrize("rho,budget", [(0.0, 4), (0.5, 4), (1.0, 3)])
def test_budget_and_pairing(dense, rho, budget):
    masked = subsample_cells(dense, budget, rho=rho, random_state=1)
    sizes = masked.groupby(["model", "task"]).size()
    assert (sizes == budget).all() and len(sizes) == 8 * 3
    shared_target = round(rho * budget)
    for _, task in masked.groupby("task"):
        sets = [set(g.query_id) for _, g in task.groupby("model")]
        common = set.intersection(*sets)
        assert len(common) >= shared_target
        if rho == 0.0:  # independent samples of 4 from 40: overlap is incidental and small
            overlaps = [len(a & b) for a in sets for b in sets if a is not b]
            assert np.mean(overlaps) < 1.0


def test_reference_is_the_full_cell_mean(dense):
    masked = subsample_cells(dense, 2, random_state=3)
    full = dense.groupby(["model", "task"]).score.mean()
    ref = masked.groupby(["model", "task"]).reference_score.first()
    pd.testing.assert_series_equal(ref, full, check_names=False)
