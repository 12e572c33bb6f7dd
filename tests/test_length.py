"""The answer-length predictors (:mod:`pkps_core.methods.length`): the length score's
arithmetic, the calibration at the targets' budget, and the information rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from pkps_core.methods.length import length_predictions, length_scores
from pkps_core.predict import build_context, predict
from pkps_core.views.new_model import length_sentence, new_model_report

N_FAMILIES, PER_FAMILY, N_TASKS, N_QUERIES = 14, 2, 3, 30


def judged_by_length(seed: int = 0, noise: float = 0.3) -> tuple[pd.DataFrame, pd.Series]:
    """A cache where the judge rewards length: model i answers query q with
    ``base_q · exp(quality_i + N(0, noise²))`` characters and scores
    ``0.3 + 0.25 quality_i + N(0, 0.1²)`` (clipped to [0, 1]); returns the records and
    each model's true overall score.
    """
    rng = np.random.default_rng(seed)
    rows = []
    bases = rng.integers(40, 400, size=(N_TASKS, N_QUERIES))
    for f in range(N_FAMILIES):
        for k in range(PER_FAMILY):
            model, quality = f"fam{f:02d}_m{k}", rng.normal(0, 0.5)
            for t in range(N_TASKS):
                for q in range(N_QUERIES):
                    length = int(bases[t, q] * np.exp(quality + rng.normal(0, noise)))
                    score = float(np.clip(0.3 + 0.25 * quality + rng.normal(0, 0.1), 0, 1))
                    rows.append(
                        {
                            "model": model,
                            "family": f"fam{f:02d}",
                            "task": f"task{t}",
                            "query_id": f"q{q}",
                            "query": f"question {t} {q} " + "word " * (q % 7),
                            "response": "x" * max(length, 1),
                            "score": score,
                        }
                    )
    records = pd.DataFrame(rows)
    return records, records.groupby("model")["score"].mean()


def thin(records: pd.DataFrame, targets, budget: int, seed: int) -> pd.DataFrame:
    """References untouched; each target cell keeps ``budget`` random unscored responses."""
    is_target = records["model"].isin(targets)
    rows = records[is_target].sample(frac=1.0, random_state=seed)
    rows = rows[rows.groupby(["model", "task"]).cumcount() < budget].copy()
    rows["score"] = np.nan
    return pd.concat([records[~is_target], rows], ignore_index=True)


@pytest.fixture(scope="module")
def cache():
    records, truth = judged_by_length()
    targets = sorted(records.loc[records["family"] < "fam04", "model"])
    return records, truth, targets


def test_length_score_is_the_leave_family_out_standardised_log_length(cache):
    records, _, targets = cache
    masked = thin(records, targets, 4, seed=1)
    context = build_context(masked, holdout="family", targets=targets, shadow_repeats=0)
    z = length_scores(context)
    frame = context.records.assign(loglen=np.log1p(context.records["response"].str.len()))
    references = frame[~frame["model"].isin(targets)]
    for i in [0, 1, len(context.models) - 1]:  # two targets and a reference
        model, family = context.models[i], context.families[i]
        own = frame[frame["model"] == model]
        others = references[references["family"] != family]
        stats = others.groupby(["task", "query_id"])["loglen"].agg(["mean", "std"])
        keyed = own.join(stats, on=["task", "query_id"])
        expected = ((keyed["loglen"] - keyed["mean"]) / keyed["std"]).mean()
        assert z[i] == pytest.approx(expected, rel=1e-9)


def test_responses_only_targets_are_ranked_by_their_length(cache):
    records, truth, targets = cache
    masked = thin(records, targets, 2, seed=2)
    out = predict(
        masked, ["mean", "length", "pkps", "pkps-length"], holdout="family", targets=targets
    )
    rows = out[out["model"].isin(targets)]
    overall = rows.groupby(["method", "model"])["prediction"].mean().unstack("method")
    true = truth.loc[overall.index]
    assert spearmanr(overall["length"], true).statistic >= 0.8
    mae = overall.sub(true, axis=0).abs().mean()
    assert mae["length"] < 0.6 * mae["mean"]
    # the covariate helps PKPS where the judge rewards length
    assert mae["pkps-length"] < mae["pkps"]


@pytest.mark.slow
def test_the_line_is_fitted_at_the_targets_budget(cache):
    """At one response per cell a target's length score is noisy; the shadows (references
    at that budget) flatten the line, dense references would not (regression dilution)."""
    _, _, targets = cache
    records, truth = judged_by_length(seed=1, noise=1.0)  # one answer says little
    masked = thin(records, targets, 1, seed=3)
    with_shadows = build_context(masked, holdout="family", targets=targets)
    dense = build_context(masked, holdout="family", targets=targets, shadow_repeats=0)
    target_rows = np.isin(with_shadows.models, targets)
    spread_shadows = np.nanstd(length_predictions(with_shadows)[0][target_rows])
    spread_dense = np.nanstd(length_predictions(dense)[0][np.isin(dense.models, targets)])
    assert spread_shadows < spread_dense
    errors = {}
    for name, context in (("shadows", with_shadows), ("dense", dense)):
        prediction = length_predictions(context)[0]
        rows = np.isin(context.models, targets)
        per_model = np.nanmean(prediction[rows], axis=1)
        errors[name] = np.abs(per_model - truth.loc[context.models[rows]].to_numpy()).mean()
    assert errors["shadows"] <= errors["dense"]


def test_a_shadow_never_reads_its_own_family(cache):
    records, _, targets = cache
    masked = thin(records, targets, 4, seed=4)
    context = build_context(masked, holdout="family", targets=targets)
    before = length_predictions(context)[0]
    family = "fam09"
    changed = masked.copy()
    changed.loc[changed["family"] == family, "score"] = 1.0  # its references become 1
    after_context = build_context(changed, holdout="family", targets=targets)
    after = length_predictions(after_context)[0]
    origin = np.asarray(context.origin)
    own = context.shadows & (context.families[np.maximum(origin, 0)] == family)
    assert own.any()
    np.testing.assert_allclose(after[own], before[own])
    other = context.shadows & ~own
    assert not np.allclose(after[other], before[other])  # the others do read it


def test_no_response_text_means_no_length_prediction(cache):
    records, _, targets = cache
    masked = thin(records, targets, 4, seed=5).drop(columns=["response"])
    masked["response_embedding"] = [[float(len(q)), 1.0] for q in masked["query"]]
    out = predict(masked, ["length"], holdout="family", targets=targets)
    assert out["prediction"].isna().all()
    assert out["note"].str.contains("needs response text").all()


@pytest.mark.slow
def test_the_new_model_report_states_the_length_score(cache):
    records, _, targets = cache
    longest = records.groupby("model")["response"].apply(lambda r: r.str.len().mean()).idxmax()
    report = new_model_report(records, longest, holdout="family")
    context = build_context(records, holdout="family", targets=[longest])
    z = length_scores(context)
    assert report.overall["length_score"] == pytest.approx(z[context.models == longest][0])
    references = ~np.isin(context.models, [longest]) & ~context.shadows
    assert report.overall["length_high"] == pytest.approx(z[references].max())
    beyond = dict(report.overall, length_score=report.overall["length_high"] + 0.5)
    assert "longer than every reference's" in length_sentence(beyond)
    inside = dict(report.overall, length_score=report.overall["length_low"] + 1e-9)
    assert "(the references' own range: " in length_sentence(inside)


def test_the_demo_texts_carry_no_score_in_their_length():
    """The demo's display texts say whether an answer was right; their lengths must not, or
    the length methods would read the score off the text."""
    from pkps_core.demo import demo_records

    records = demo_records()
    lengths = records["response"].str.len()
    assert lengths.groupby(records["model"]).nunique().max() == 1  # right or wrong
    targets = sorted(records["model"].unique())[:2]
    context = build_context(records, holdout="family", targets=targets)
    assert np.isnan(length_scores(context)).all()
