"""The family-level conformal quantile of the shadow intervals (new models come as whole
families whose cells share their errors)."""

import numpy as np
import pandas as pd
import pytest

from pkps_core.trust.intervals import conformal_quantile, grouped_conformal_quantile


def test_one_score_per_group_is_the_split_conformal_quantile():
    scores = np.random.default_rng(0).random(37)
    for level in (0.5, 0.8, 0.9):
        assert grouped_conformal_quantile(scores, np.arange(37), level) == conformal_quantile(
            scores, level
        )
    assert grouped_conformal_quantile(np.arange(5.0), np.arange(5), 0.9) == np.inf
    # too few groups for a family-level quantile (8 < 9): the cell-level one
    cells = np.arange(40.0)
    assert grouped_conformal_quantile(cells, np.arange(40) % 8, 0.9) == conformal_quantile(
        cells, 0.9
    )
    assert np.isnan(grouped_conformal_quantile(np.array([np.nan]), np.array([0])))
    with pytest.raises(ValueError, match="level"):
        grouped_conformal_quantile(scores, np.arange(37), 1.0)


def test_a_large_group_counts_once():
    small = np.linspace(0.0, 1.0, 30)
    scores = np.concatenate([small, np.full(60, 10.0)])  # one family, 60 bad cells
    groups = np.concatenate([np.arange(30), np.full(60, 99)])
    assert conformal_quantile(scores, 0.9) == 10.0
    assert grouped_conformal_quantile(scores, groups, 0.9) < 1.0


def test_new_families_are_covered_where_the_cell_quantile_falls_short():
    """Ten calibration families of 1–19 cells sharing a family error: pooled over cells the
    split-conformal quantile covers a new family's cells well below 90 %; counting
    families, at least 90 %."""
    rng = np.random.default_rng(0)
    grouped, pooled = [], []
    for _ in range(1000):
        sizes = rng.integers(1, 20, 11)
        effects = rng.standard_normal(11)
        scores = [np.abs(effects[k] + 0.1 * rng.standard_normal(sizes[k])) for k in range(11)]
        calibration = np.concatenate(scores[:10])
        families = np.repeat(np.arange(10), sizes[:10])
        new = scores[10]
        grouped.append(np.mean(new <= grouped_conformal_quantile(calibration, families, 0.9)))
        pooled.append(np.mean(new <= conformal_quantile(calibration, 0.9)))
    assert np.mean(grouped) >= 0.9
    assert np.mean(pooled) < 0.88


def test_prediction_intervals_count_families_when_asked():
    from pkps_core.predict import build_context
    from pkps_core.synthetic import make_synthetic
    from pkps_core.trust.intervals import prediction_intervals

    data = make_synthetic(n_models=36, n_tasks=3, budget=12, rho=0.0, random_state=4)
    records = data.records.drop(columns=["reference_score"], errors="ignore")
    families = sorted(records["family"].unique())
    targets = sorted(records.loc[records["family"].isin(families[:2]), "model"].unique())
    is_target = records["model"].isin(targets)
    thin = records[is_target].groupby(["model", "task"]).head(2)
    masked = pd.concat([records[~is_target], thin], ignore_index=True)
    params = {"response_kernel": "rbf", "query_bandwidth": "median"}
    context = build_context(masked, holdout="family", targets=targets, space_params=params)
    prediction = context.knn(context.pkps)
    cells = prediction_intervals(context, "pkps", prediction)
    grouped = prediction_intervals(context, "pkps", prediction, unit="families")
    # ten reference families: finite at the family level, and more cautious than cells
    assert np.isfinite(grouped.quantile).all()
    assert grouped.quantile[0] >= cells.quantile[0] > 0
    with pytest.raises(ValueError, match="unit"):
        prediction_intervals(context, "pkps", prediction, unit="models")
