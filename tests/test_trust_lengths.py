"""The response-length extrapolation check and the intervals of warned new models
(issue 15: coverage where a new model answers unlike every reference)."""

import numpy as np
import pandas as pd
import pytest

from pkps_core import trust
from pkps_core.methods import METHODS
from pkps_core.predict import build_context, predict
from pkps_core.protocols import mask_new_model, prepare_records
from pkps_core.synthetic import make_synthetic
from pkps_core.trust.columns import trust_columns
from pkps_core.trust.extrapolation import REASON_WORDS
from pkps_core.trust.intervals import prediction_intervals
from pkps_core.trust.responses import length_features, response_length_outliers

SPACE = {"query_bandwidth": "median", "random_state": 0}


def _with_texts(records: pd.DataFrame, seed: int, long_models=()) -> pd.DataFrame:
    """Response texts whose lengths follow a per-model typical length (log-normal around
    400 characters); ``long_models`` answer at ten times that."""
    rng = np.random.default_rng(seed)
    models = records["model"].unique()
    typical = dict(zip(models, rng.normal(np.log(400), 0.25, len(models)), strict=True))
    for model in long_models:
        typical[model] = np.log(4000)
    log_length = records["model"].map(typical) + rng.normal(0, 0.4, len(records))
    lengths = np.maximum(np.exp(log_length).astype(int), 1)
    return records.assign(response=["x" * n for n in lengths])


@pytest.fixture(scope="module")
def cache():
    synthetic = make_synthetic(
        n_models=36, n_tasks=3, budget=16, rho=1.0, pool_size=16, random_state=3
    )
    return prepare_records(synthetic.records)


def test_length_feature_is_the_mean_log_length_per_model(cache):
    records = _with_texts(cache, seed=0)
    context = build_context(records, holdout="family", space_params=SPACE)
    features = length_features(context)
    expected = (np.log1p(records["response"].str.len()).groupby(records["model"]).mean()).reindex(
        context.models
    )
    np.testing.assert_allclose(features, expected.to_numpy())


@pytest.mark.parametrize("mode", ["responses-only", "scored"])
def test_a_new_model_with_long_answers_is_warned_and_ordinary_ones_are_not(cache, mode):
    masked, targets = mask_new_model(cache, 2, mode=mode, target_share=0.25, seed=1)
    targets = sorted(targets)
    long_model = targets[0]
    records = _with_texts(masked, seed=1, long_models=[long_model])
    context = build_context(records, holdout="family", targets=targets, space_params=SPACE)
    flags, features, threshold = response_length_outliers(context)
    position = {m: i for i, m in enumerate(context.models)}
    assert np.isfinite(threshold) and context.shadows.sum() >= 19
    assert flags[position[long_model]]
    # (the other targets answer like the references: their false-alarm rate is measured
    # in test_ordinary_new_models_are_rarely_warned)
    # Only targets (shadows included) are ever flagged, never a reference.
    assert not flags[~context.targets].any()
    frame = predict(context, ["pkps", "ensemble"], intervals=0.9)
    mine = frame[frame["model"] == long_model]
    assert mine["extrapolation"].all()
    assert mine["extrapolation_reason"].str.contains("responses longer than every reference").all()
    words = trust.reason_words(mine["extrapolation_reason"].iloc[0], short=True)
    assert "longer responses than every reference" in words
    # every "; "-separated clause of every reason is one check's (nothing splits a clause)
    labels = {label for _, _, label in REASON_WORDS}
    for reason in mine["extrapolation_reason"]:
        for clause in reason.split("; "):
            assert trust.reason_words(clause, short=True)[0] in labels, clause
    low, high = trust.score_range(context)
    if mode == "responses-only":
        # Nothing of its own bounds it and nothing observed like it vouches for less.
        assert (mine["lower"] == low).all() and (mine["upper"] == high).all()
        assert mine["extrapolation_reason"].str.contains("interval is the score range").all()
    else:
        # Its own two scored responses bound it: its interval holds their sampling
        # interval, with the item SD at least the Bhatia–Davis bound, not the score range.
        own_low, own_high = trust.own_sample_interval(context, 0.9, bounded=True)
        for row in mine.itertuples():
            i, t = position[long_model], list(context.tasks).index(row.task)
            assert row.lower <= own_low[i, t] + 1e-12 and row.upper >= own_high[i, t] - 1e-12
        assert not mine["extrapolation_reason"].str.contains("score range").any()
        assert ((mine["upper"] - mine["lower"]) < high - low).any()
    ordinary = frame[frame["model"].isin(targets[1:]) & ~frame["extrapolation"]]
    assert len(ordinary) and ((ordinary["upper"] - ordinary["lower"]) < high - low).all()


def test_ordinary_new_models_are_rarely_warned(cache):
    """Targets whose answers are exchangeable with the references' fire with probability
    at most 5 % (the conformal test against the shadows at their budget)."""
    fired, seen = 0, 0
    for seed in range(8):
        masked, targets = mask_new_model(cache, 2, mode="responses-only", seed=10 + seed)
        records = _with_texts(masked, seed=10 + seed)
        context = build_context(
            records, holdout="family", targets=list(targets), space_params=SPACE
        )
        flags, _, threshold = response_length_outliers(context)
        assert np.isfinite(threshold)
        real = context.targets & ~context.shadows
        fired, seen = fired + int(flags[real].sum()), seen + int(real.sum())
    assert seen >= 60
    assert fired / seen <= 0.1, (fired, seen)


def test_the_check_needs_shadows_and_texts(cache):
    records = _with_texts(cache, seed=2)
    context = build_context(records, holdout="family", space_params=SPACE)
    flags, _, threshold = response_length_outliers(context)
    assert not flags.any() and threshold == np.inf  # no new models: no shadows
    masked, targets = mask_new_model(cache, 2, mode="responses-only", seed=2)
    context = build_context(masked, holdout="family", targets=list(targets), space_params=SPACE)
    flags, features, _ = response_length_outliers(context)
    assert not flags.any() and np.isnan(features).all()  # embeddings only: no texts


def test_mondrian_calibration_reads_only_the_unwarned_shadow_cells(cache):
    masked, targets = mask_new_model(cache, 2, mode="responses-only", seed=4)
    targets = sorted(targets)
    long_reference = sorted(set(masked["model"]) - set(targets))[0]
    records = _with_texts(masked, seed=4, long_models=[targets[0], long_reference])
    context = build_context(records, holdout="family", targets=targets, space_params=SPACE)
    prediction = METHODS["pkps"](context).prediction
    flags, _ = trust.extrapolation_warnings(context, "pkps", prediction)
    # The long reference's shadows answer unlike every other family: they set the
    # threshold (the conformal test's largest calibration scores), and the longer exceeds it.
    long_shadows = context.shadows & np.char.startswith(
        context.models.astype(str), long_reference + " [shadow"
    )
    assert long_shadows.sum() == 2 and flags[long_shadows].all(axis=1).any()
    pooled = prediction_intervals(context, "pkps", prediction)
    clean = prediction_intervals(context, "pkps", prediction, calibrate=~flags)
    usable = (
        context.shadows[:, None]
        & np.isfinite(context.calibration_truth)
        & np.isfinite(prediction)
        & (pooled.sigma > 0)
    )
    assert pooled.n_calibration[0] == usable.sum()
    assert clean.n_calibration[0] == (usable & ~flags).sum() < usable.sum()
    # warned_intervals="mondrian": unwarned cells follow the clean calibration; the
    # default ("bounded") calibrates every cell on every shadow cell.
    for rule, expected in (("mondrian", clean), ("bounded", pooled)):
        columns = trust_columns(context, "pkps", prediction, 0.9, warned_intervals=rule)
        unwarned = ~columns["extrapolation"] & np.isfinite(prediction)
        np.testing.assert_allclose(columns["lower"][unwarned], expected.lower[unwarned])
        np.testing.assert_allclose(columns["upper"][unwarned], expected.upper[unwarned])
    with pytest.raises(ValueError, match="warned_intervals"):
        trust_columns(context, "pkps", prediction, warned_intervals="pooled")


def test_bounded_own_interval_uses_at_least_the_bhatia_davis_sd(cache):
    masked, targets = mask_new_model(cache, 4, mode="scored", seed=5)
    context = build_context(masked, holdout="family", targets=list(targets), space_params=SPACE)
    low, high = trust.score_range(context)
    plain_low, plain_high = trust.own_sample_interval(context, 0.9)
    bound_low, bound_high = trust.own_sample_interval(context, 0.9, bounded=True)
    x, n = context.sample, np.maximum(context.n_responses, 1)
    sd = np.fmax(context.item_sd()[None, :], np.sqrt((high - x) * (x - low)))
    expected = np.clip(x + 1.6448536 * sd / np.sqrt(n), low, high)
    scored = np.isfinite(x)
    np.testing.assert_allclose(bound_high[scored], expected[scored], atol=1e-6)
    # never narrower than the pooled-SD interval, and wider where the cell sits mid-range
    assert (bound_high[scored] >= plain_high[scored] - 1e-12).all()
    assert (bound_low[scored] <= plain_low[scored] + 1e-12).all()
    middle = scored & (np.abs(x - (low + high) / 2) < 0.2 * (high - low))
    assert (
        middle.any()
        and (bound_high - bound_low)[middle].mean() > (plain_high - plain_low)[middle].mean()
    )
