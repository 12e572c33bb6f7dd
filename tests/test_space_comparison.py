"""PKPS and DKPS compared (pkps_core.views.comparison): Procrustes recovers a known
rotation, reflection, scale and shift; the agreement numbers of two identical maps are 1;
the sentence says why from the pairedness; one figure draws both maps on one colour scale
with the selected models ringed in both."""

import numpy as np
import pandas as pd
import pytest
from figure_rules import _array, figure_problems
from scipy.spatial import procrustes
from scipy.stats import ortho_group

from pkps_core.text import plotly_safe
from pkps_core.views import comparison as cmp
from pkps_core.views.comparison_figure import comparison_figure
from pkps_core.views.space import SpaceSummary


def _rotation(dim: int, seed: int) -> np.ndarray:
    return ortho_group.rvs(dim, random_state=seed)


def test_procrustes_recovers_a_known_rotation_scale_and_shift():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(30, 4))
    rotation = _rotation(4, seed=1)
    # the moving map is the reference turned, shrunk and moved: undo all three
    moving = 0.37 * reference @ rotation.T + np.array([3.0, -1.0, 0.5, 2.0])
    fitted = cmp.ProcrustesAlignment().fit(moving, reference)
    np.testing.assert_allclose(fitted.transform(moving), reference, atol=1e-10)
    np.testing.assert_allclose(fitted.rotation_, rotation, atol=1e-10)
    assert fitted.scale_ == pytest.approx(1 / 0.37)
    assert fitted.disparity_ == pytest.approx(0, abs=1e-20)


def test_procrustes_recovers_a_reflection():
    rng = np.random.default_rng(2)
    reference = rng.normal(size=(12, 2))
    mirrored = reference * np.array([-1.0, 1.0])
    fitted = cmp.ProcrustesAlignment().fit(mirrored, reference)
    assert np.linalg.det(fitted.rotation_) == pytest.approx(-1)
    np.testing.assert_allclose(fitted.transform(mirrored), reference, atol=1e-12)


def test_disparity_is_scipys_on_noisy_maps():
    rng = np.random.default_rng(3)
    reference = rng.normal(size=(25, 3))
    moving = reference @ _rotation(3, seed=4) * 2 + rng.normal(scale=0.3, size=(25, 3))
    _, _, scipy_disparity = procrustes(reference, moving)
    fitted = cmp.ProcrustesAlignment().fit(moving, reference)
    assert fitted.disparity_ == pytest.approx(scipy_disparity, rel=1e-10)
    assert 0 < fitted.disparity_ < 1
    # without the scale the fit can only be worse
    assert (
        cmp.ProcrustesAlignment(scale=False).fit(moving, reference).disparity_ > fitted.disparity_
    )


def test_procrustes_pads_a_narrower_map_and_refuses_bad_input():
    rng = np.random.default_rng(5)
    reference = np.c_[rng.normal(size=(10, 2)), np.zeros(10)]
    fitted = cmp.ProcrustesAlignment().fit(reference[:, :2] @ _rotation(2, 6), reference)
    assert fitted.transform(reference[:, :2] @ _rotation(2, 6)).shape == (10, 3)
    assert fitted.disparity_ == pytest.approx(0, abs=1e-20)
    with pytest.raises(ValueError, match="same models"):
        cmp.ProcrustesAlignment().fit(reference[:5], reference)
    with pytest.raises(ValueError, match="NaN"):
        cmp.ProcrustesAlignment().fit(np.full((3, 2), np.nan), reference[:3])


def _distances(points: np.ndarray) -> np.ndarray:
    return np.linalg.norm(points[:, None] - points[None], axis=-1)


def test_agreement_of_identical_and_scaled_maps_is_one():
    points = np.random.default_rng(7).normal(size=(20, 3))
    same = cmp.map_agreement(_distances(points), _distances(points))
    assert same.distance_correlation == pytest.approx(1)
    assert same.nearest_kept == 20 and same.nearest_share == 1
    scaled = cmp.map_agreement(_distances(points), 3 * _distances(points @ _rotation(3, 8)))
    assert scaled.distance_correlation == pytest.approx(1)
    assert scaled.nearest_kept == 20


def test_agreement_counts_nearest_neighbours_that_move_and_equal_distances():
    line = np.array([[0.0], [1.0], [3.0], [7.0]])  # nearest: 1, 0, 1, 2
    moved = np.array([[0.0], [2.5], [3.0], [7.0]])  # nearest: 1, 2, 1, 2
    agreement = cmp.map_agreement(_distances(line), _distances(moved))
    assert agreement.nearest_kept == 3
    assert 0 < agreement.distance_correlation < 1
    flat = np.ones((4, 4)) - np.eye(4)  # DKPS without shared queries: all distances 1
    nothing = cmp.map_agreement(_distances(line), flat)
    assert np.isnan(nothing.distance_correlation)
    assert nothing.nearest_kept == 0  # a tie with everyone is no neighbour kept


def _pairs(rho: dict[tuple[str, str], float]) -> pd.DataFrame:
    models = sorted({m for pair in rho for m in pair})
    rows = [
        {"model_a": a, "model_b": b, "rho": 1.0 if a == b else rho.get((a, b), rho.get((b, a)))}
        for a in models
        for b in models
    ]
    return pd.DataFrame(rows)


def test_the_sentence_says_how_much_and_why():
    close = cmp.MapAgreement(n_models=40, distance_correlation=0.998, nearest_kept=36)
    paired = cmp.pairing_summary(_pairs({("a", "b"): 1.0, ("a", "c"): 1.0, ("b", "c"): 1.0}))
    assert paired.paired_share == 1 and paired.unpaired_share == 0
    text = cmp.agreement_sentence(close, paired)
    assert "agree closely" in text and "**0.998**" in text and "36 of 40 models (90%)" in text
    assert "the paired limit" in text and "ρ = 1 for every pair" in text

    unpaired = cmp.pairing_summary(_pairs({("a", "b"): 0.0, ("a", "c"): 0.0, ("b", "c"): 0.0}))
    flat = cmp.MapAgreement(n_models=45, distance_correlation=float("nan"), nearest_kept=0)
    text = cmp.agreement_sentence(flat, unpaired)
    assert "cannot agree" in text and "ρ = 0 for every pair" in text and "arbitrary" in text

    partly = cmp.pairing_summary(_pairs({("a", "b"): 0.5, ("a", "c"): 0.0, ("b", "c"): 0.25}))
    assert partly.mean_rho == pytest.approx(0.25) and partly.unpaired_share == pytest.approx(1 / 3)
    weak = cmp.MapAgreement(n_models=3, distance_correlation=0.4, nearest_kept=1)
    text = cmp.agreement_sentence(weak, partly)
    assert (
        "disagree" in text and "share 25% of their queries" in text and "33% of the pairs" in text
    )


def _summary(points: np.ndarray, models: list[str]) -> SpaceSummary:
    coordinates = pd.DataFrame(points, columns=[f"dim_{k + 1}" for k in range(points.shape[1])])
    coordinates.insert(0, "family", [m.split("/")[0] for m in models])
    coordinates.insert(0, "model", models)
    coordinates["n_responses"] = 10
    empty = np.array([])
    return SpaceSummary(
        coordinates, _distances(points), "rbf", 1.0, 1.0, empty, empty, "exact", empty, empty
    )


MODELS = [f"fam{k % 3}/m{k}" for k in range(9)] + ["<b>bold</b>"]


def _cells() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    rows = []
    for model in MODELS:
        for task, queries in (("math", 10), ("code", 30)):
            n = queries if model != "fam0/m0" or task == "math" else 0
            if n:
                rows.append(
                    {
                        "model": model,
                        "task": task,
                        "family": model.split("/")[0],
                        "n_responses": n,
                        "reference": float(rng.uniform()),
                    }
                )
    return pd.DataFrame(rows)


def test_metadata_weighs_tasks_by_their_queries():
    cells = _cells()
    metadata = cmp.model_metadata(cells)
    assert list(metadata.columns[:4]) == ["overall score", "family", "responses", "tasks answered"]
    row = cells[cells["model"] == "fam1/m1"].set_index("task")["reference"]
    assert metadata.loc["fam1/m1", "overall score"] == pytest.approx(
        (10 * row["math"] + 30 * row["code"]) / 40
    )
    # a model with one task: its overall is that task's score; the other task is missing
    only_math = cells[(cells["model"] == "fam0/m0")]["reference"]
    assert metadata.loc["fam0/m0", "overall score"] == pytest.approx(only_math.item())
    assert np.isnan(metadata.loc["fam0/m0", "score in code"])
    assert metadata.loc["fam0/m0", "responses"] == 10
    assert cmp.colour_options(metadata)[0] == "overall score"


def test_search_finds_names_exact_first():
    models = ["gpt4", "gpt4_turbo", "claude", "GPT4-mini"]
    assert cmp.search_models(models, "GPT4") == ["gpt4", "gpt4_turbo", "GPT4-mini"]
    assert cmp.search_models(models, "  ") == []


def _pair_of_maps():
    rng = np.random.default_rng(12)
    pkps = rng.normal(size=(len(MODELS), 4))
    order = rng.permutation(len(MODELS))  # DKPS lists the models in another order
    dkps = (0.5 * pkps @ _rotation(4, 13) + 1.0)[order]
    return _summary(pkps, MODELS), _summary(dkps, [MODELS[i] for i in order])


def test_compare_spaces_aligns_dkps_onto_pkps_by_model_name():
    left, right = _pair_of_maps()
    comparison = cmp.compare_spaces(left, right)
    frame = comparison.frame
    assert list(frame["model"]) == MODELS
    np.testing.assert_allclose(frame["x_right"], frame["x_left"], atol=1e-10)
    np.testing.assert_allclose(frame["y_right"], frame["y_left"], atol=1e-10)
    np.testing.assert_allclose(frame["shift"], 0, atol=1e-10)
    assert comparison.agreement.distance_correlation == pytest.approx(1)
    assert comparison.agreement.nearest_kept == len(MODELS)


def test_compare_spaces_aligns_given_2d_views():
    left, right = _pair_of_maps()
    rng = np.random.default_rng(14)
    view = rng.normal(size=(len(MODELS), 2))
    positions = {m: i for i, m in enumerate(MODELS)}
    turned = (view @ _rotation(2, 15) * 4)[[positions[m] for m in right.models]]
    comparison = cmp.compare_spaces(left, right, view, turned)
    assert comparison.view == "UMAP"
    np.testing.assert_allclose(comparison.frame[["x_right", "y_right"]], view, atol=1e-10)


def test_the_figure_draws_both_maps_on_one_colour_bar_and_rings_the_selection():
    left, right = _pair_of_maps()
    comparison = cmp.compare_spaces(left, right)
    metadata = cmp.model_metadata(_cells())
    figure = comparison_figure(comparison, metadata, highlight=["<b>bold</b>", "fam1/m4"])
    spec = figure.to_plotly_json()
    assert not figure_problems(spec)
    bars = [t for t in spec["data"] if (t.get("marker") or {}).get("colorbar")]
    assert not bars and spec["layout"]["coloraxis"]["showscale"]
    assert spec["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "overall score"
    coloured = [t for t in spec["data"] if (t.get("marker") or {}).get("coloraxis")]
    assert {t["xaxis"] for t in coloured} == {"x", "x2"}  # two panels, one colour axis
    rings = [t for t in spec["data"] if t["name"] == "selected"]
    assert [t["xaxis"] for t in rings] == ["x", "x2"]
    for ring in rings:
        assert sorted(ring["text"]) == ["&lt;b&gt;bold&lt;/b&gt;", "fam1/m4"]
    layout = spec["layout"]
    assert layout["xaxis2"]["matches"] == "x" and layout["yaxis2"]["matches"] == "y"
    assert layout["xaxis"]["range"] == layout["xaxis2"]["range"] == list(figure.layout.xaxis.range)
    assert layout["yaxis"]["automargin"] and layout["xaxis"]["automargin"]
    names = {row[0] for t in coloured for row in t["customdata"]}
    assert names == set(MODELS)  # raw names in customdata[0] (selections map back)


def test_the_figure_by_family_and_in_overlay_mode():
    left, right = _pair_of_maps()
    comparison = cmp.compare_spaces(left, right)
    metadata = cmp.model_metadata(_cells())
    by_family = comparison_figure(comparison, metadata, "family").to_plotly_json()
    assert not figure_problems(by_family)
    assert not by_family["layout"]["coloraxis"]["showscale"]
    legend = [t["name"] for t in by_family["data"] if t.get("showlegend")]
    assert sorted(legend) == sorted(set(metadata["family"].map(plotly_safe)))
    overlay = comparison_figure(comparison, metadata, mode=cmp.OVERLAY).to_plotly_json()
    assert not figure_problems(overlay)
    lines = next(t for t in overlay["data"] if t["mode"] == "lines")
    assert len(_array(lines["x"])) == 3 * len(MODELS)  # one segment (and a gap) per model
    assert "xaxis2" not in overlay["layout"]
    with pytest.raises(ValueError, match="unknown colour"):
        comparison_figure(comparison, metadata, "nope")


def test_shown_coordinates_hold_the_view_the_score_family_and_responses():
    left, right = _pair_of_maps()
    comparison = cmp.compare_spaces(left, right)
    metadata = cmp.model_metadata(_cells())
    export = cmp.shown_coordinates(comparison, metadata)
    assert list(export.columns) == [
        "space", "model", "x", "y", "view", "frame", "overall_score", "family", "responses"
    ]  # fmt: skip
    assert len(export) == 2 * len(MODELS) and set(export["view"]) == {"MDS axes 1-2"}
    dkps = export[export["space"] == "dkps"].set_index("model")
    np.testing.assert_allclose(dkps.loc[MODELS, "x"], comparison.frame["x_right"])
    assert dkps.loc["fam1/m1", "overall_score"] == metadata.loc["fam1/m1", "overall score"]
