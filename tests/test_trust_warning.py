"""The extrapolation warning (issue 9): what fires, what does not, and why."""

import numpy as np
import pandas as pd
import pytest

from pkps_core import trust, views
from pkps_core.predict import build_context, predict
from pkps_core.protocols import full_scores, mask_split, prepare_records
from pkps_core.synthetic import make_synthetic
from pkps_core.trust.extrapolation import _nearest_reference

SPACE = {"query_bandwidth": "median", "random_state": 0}


def _thin(frame: pd.DataFrame, per_task: int, seed: int) -> pd.DataFrame:
    """``per_task`` random responses of each task of ``frame``."""
    frame = frame.sample(frac=1.0, random_state=seed)
    return frame[frame.groupby("task").cumcount() < per_task]


def test_conformal_outlier_threshold_is_the_c_plus_one_largest_value():
    values = np.arange(1.0, 20.0)  # n = 19: c = floor(0.05 * 20 - 1) = 0 -> the maximum
    assert trust.conformal_outlier_threshold(values, 0.05) == 19.0
    # n = 18 is too few for a 5 % test: (1 + 0) / 19 > 0.05 whatever the new value.
    assert trust.conformal_outlier_threshold(values[:18], 0.05) == np.inf
    # n = 39: c = floor(0.05 * 40 - 1) = 1 -> the second largest; NaN and inf are ignored.
    values = np.concatenate([np.arange(1.0, 40.0), [np.nan, np.inf]])
    assert trust.conformal_outlier_threshold(values, 0.05) == 38.0
    # The definition: exceeding the threshold is exactly a p-value <= alpha.
    rng = np.random.default_rng(0)
    calibration = rng.normal(size=50)
    threshold = trust.conformal_outlier_threshold(calibration, 0.1)
    for d in (threshold, np.nextafter(threshold, np.inf), threshold + 1.0, 0.0):
        p = (1 + np.sum(calibration >= d)) / (len(calibration) + 1)
        assert (d > threshold) == (p <= 0.1), d
    with pytest.raises(ValueError):
        trust.conformal_outlier_threshold(calibration, 1.0)


@pytest.fixture(scope="module")
def thin_family_members():
    """Five mid-range references, each re-observed as a new model of its own family with one
    response per task (4 responses, against 96 for every reference): thin but ordinary."""
    cache = make_synthetic(n_models=30, n_tasks=4, budget=24, rho=1.0, pool_size=24, random_state=2)
    records = cache.records
    by_score = records.groupby("model")["reference_score"].mean().sort_values()
    parts, names = [records], []
    for k, source in enumerate(by_score.index[8:22:3]):
        rows = records[records["model"] == source]
        name = f"{rows['family'].iloc[0]}/thin-{k}"
        parts.append(_thin(rows, 1, k).assign(model=name))
        names.append(name)
    context = build_context(
        pd.concat(parts, ignore_index=True), holdout="family", targets=names, space_params=SPACE
    )
    return context, names


def test_thin_but_ordinary_targets_are_not_outside_the_region(thin_family_members):
    context, names = thin_family_members
    targets = np.isin(context.models, names)
    assert (trust.region_budget(context) == 1).all()  # the targets' median budget
    nearest, threshold = trust.region_distances(context)
    assert np.isfinite(threshold).all()
    matched = (nearest[targets] > threshold[None, :]).any(axis=1)
    assert matched.sum() <= 1, context.models[targets][matched]
    # The check has teeth: calibrated on the fully observed references' own distances
    # (Eq. 1 as written, no budget matching) the same targets look out of region.
    from pkps_core.space import PerspectiveSpace

    as_written = {
        **SPACE,
        "self_pairs": "include",
        "query_bandwidth": context.pkps.query_bandwidth_,
    }
    distances = PerspectiveSpace(**as_written).fit(context.prepared).distance_matrix_
    references = context.training_references
    near = _nearest_reference(distances, references, context.allowed("family"))
    own = np.where(np.isfinite(references), near, np.nan)  # the references' own
    unmatched = (near[targets] > np.nanmax(own, axis=0)[None, :]).any(axis=1)
    assert unmatched.sum() >= 3, unmatched
    frame = predict(context, ["pkps", "ensemble"], intervals=0.9)
    region = frame["extrapolation_reason"].str.contains("outside the references' region")
    assert region[frame["model"].isin(names)].mean() <= 0.2


def test_a_target_better_than_every_reference_is_warned_and_says_why():
    cache = make_synthetic(n_models=30, n_tasks=4, budget=24, rho=1.0, pool_size=24, random_state=7)
    records = cache.records  # the best reference scores 0.73 over the four tasks
    best = records.groupby("model")["reference_score"].mean().idxmax()
    rows = _thin(records[records["model"] == best], 6, 0)
    frontier = rows.assign(model="frontier/new", family="frontier", score=1.0)
    ordinary = rows.assign(model="ordinary/new", family="ordinary")
    planted = pd.concat([records, frontier, ordinary], ignore_index=True)
    context = build_context(
        planted, holdout="family", targets=["frontier/new", "ordinary/new"], space_params=SPACE
    )
    frame = predict(context, ["sample", "pkps", "ensemble"], intervals=0.9)
    mine = frame[(frame["model"] == "frontier/new") & (frame["method"] != "sample")]
    assert len(mine) == 8 and mine["extrapolation"].all()
    reason = r"model's pooled sample score 1 over 4 tasks \(24 responses\) above every reference's"
    assert mine["extrapolation_reason"].str.contains(reason).all()
    position = trust.pooled_score_position(context).loc["frontier/new"]
    assert position["pooled"] - trust.SAMPLE_Z * position["se"] > position["ref_max"]
    # Its PKPS prediction is pulled back into the references' range: the error is real.
    pkps = mine[mine["method"] == "pkps"]
    assert (1.0 - pkps["prediction"]).mean() > 0.2
    # The same responses with their real scores are not beyond the references.
    theirs = frame[(frame["model"] == "ordinary/new") & (frame["method"] != "sample")]
    assert not theirs["extrapolation_reason"].str.contains("pooled sample score").any()
    # Its interval is stretched to hold its own sampling interval, which reaches 1.
    assert (pkps["upper"] == 1.0).all() and (pkps["lower"] <= pkps["prediction"]).all()
    # (the reason says so where the calibrated interval did not already hold it)
    assert pkps["extrapolation_reason"].str.contains("interval widened").any()
    # The sample score uses no references: never flagged. Flags and reasons agree.
    assert not frame.loc[frame["method"] == "sample", "extrapolation"].any()
    assert (frame["extrapolation"] == (frame["extrapolation_reason"] != "")).all()
    # The cell table names the checks in short labels and the methods that warned.
    cells = views.cell_overview(frame, ["sample", "pkps", "ensemble"]).set_index("model")
    frontier = cells.loc["frontier/new"]
    assert frontier["extrapolation"].all()
    assert (frontier["warned_by"] == "pkps, ensemble").all()
    labels = frontier["extrapolation_reason"].str.split("; ")
    assert labels.map(lambda found: "above every reference (model)" in found).all()
    assert labels.map(lambda found: "interval widened" in found).any()
    assert frontier["extrapolation_reason"].str.len().max() < 80
    assert (cells.loc["ordinary/new", "warned_by"] == "").all() or not cells.loc[
        "ordinary/new", "extrapolation_reason"
    ].str.contains("(model)", regex=False).any()


def test_widening_touches_only_warned_cells_with_responses_and_an_interval():
    cache = make_synthetic(n_models=12, n_tasks=3, budget=8, rho=1.0, pool_size=8, random_state=3)
    context = build_context(cache.records, holdout="family", space_params=SPACE)
    shape = (len(context.models), len(context.tasks))
    rng = np.random.default_rng(0)
    centre = rng.uniform(0.3, 0.7, shape)
    lower, upper = centre - 0.01, centre + 0.01
    lower[0, 0] = upper[0, 0] = np.nan  # no calibrated interval
    flags = np.zeros(shape, dtype=bool)
    flags[:3] = True
    context.n_responses[2, :] = 0  # a warned model observed nowhere (completion)
    new_lower, new_upper, widened = trust.widen_warned(context, lower, upper, flags, 0.9)
    own_low, own_high = trust.own_sample_interval(context, 0.9)
    assert np.isnan(new_lower[0, 0]) and np.isnan(new_upper[0, 0])
    quiet = ~flags
    assert np.array_equal(new_lower[quiet], lower[quiet])
    assert np.array_equal(new_upper[quiet], upper[quiet])
    assert np.array_equal(new_lower[2], lower[2]) and not widened[2].any()
    cells = np.zeros(shape, dtype=bool)
    cells[:2] = True
    cells[0, 0] = False
    assert np.all(new_lower[cells] <= np.minimum(lower[cells], own_low[cells]) + 1e-15)
    assert np.all(new_upper[cells] >= np.maximum(upper[cells], own_high[cells]) - 1e-15)
    assert widened[cells].all()  # ±0.01 is narrower than any 8-response sampling interval


@pytest.mark.slow
def test_warning_fires_on_extrapolation_targets_and_rarely_in_a_random_split():
    """The second paper's splits on one synthetic cohort (seed 21, not a tuning seed)."""
    records = prepare_records(
        make_synthetic(
            n_models=60, n_tasks=12, budget=24, rho=1.0, pool_size=24, random_state=21
        ).records
    )
    truth = full_scores(records)
    frames = {}
    for split in ("extrapolation", "interpolation"):
        masked, targets = mask_split(records, split, core_set=16, seed=21)
        context = build_context(
            masked, holdout="family", targets=list(targets), space_params={"random_state": 21}
        )
        frame = predict(context, ["pkps", "ensemble"], intervals=0.9)
        frame = frame[frame["model"].isin(targets)].copy()
        index = pd.MultiIndex.from_frame(frame[["model", "task"]])
        frame["abs_err"] = (frame["prediction"] - truth.reindex(index).to_numpy()).abs()
        frames[split] = frame
    for method in ("pkps", "ensemble"):
        extrapolation = frames["extrapolation"].query("method == @method")
        interpolation = frames["interpolation"].query("method == @method")
        large = extrapolation["abs_err"] > interpolation["abs_err"].median()
        recall = extrapolation.loc[large, "extrapolation"].mean()
        assert recall >= 0.7, (method, recall)
        assert interpolation["extrapolation"].mean() <= 0.2, method
    pkps = frames["extrapolation"].query("method == 'pkps'")
    assert pkps["extrapolation_reason"].str.contains("above every reference").mean() >= 0.7
    # warned cells' intervals hold their own sampling interval: they cover again
    index = pd.MultiIndex.from_frame(pkps[["model", "task"]])
    true = truth.reindex(index).to_numpy()
    warned = pkps["extrapolation"].to_numpy() & pkps["lower"].notna().to_numpy()
    inside = (pkps["lower"].to_numpy() <= true) & (true <= pkps["upper"].to_numpy())
    assert warned.sum() >= 50 and inside[warned].mean() >= 0.8
