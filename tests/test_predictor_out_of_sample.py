"""The fitted predictor's coordinates: the references' MDS, shadows and new models placed
out of sample into it by one rule (Gower's; Trosset and Priebe 2008)."""

from __future__ import annotations

import numpy as np
import pytest
from thin_new_models import thin_new_models

from pkps_core.predictor import ReferencePredictor
from pkps_core.space.out_of_sample import out_of_sample_fit


@pytest.fixture(scope="module")
def cache():
    _, references, thin, new_models = thin_new_models(
        [4, 17], 2, 1, n_models=24, n_tasks=3, budget=16, rho=0.5, random_state=7, family_size=3
    )
    predictor = ReferencePredictor(budgets=(2, 8), modes=("scored",)).fit(references)
    return predictor, thin, new_models, references


def test_new_models_and_shadows_are_placed_into_the_references_mds(cache):
    predictor, thin, new_models, _ = cache
    _, contexts = predictor.predict_contexts(thin)
    context, models = contexts[0]
    assert sorted(models) == sorted(new_models)
    inside = ~np.asarray(context.targets, dtype=bool)  # the references alone
    assert inside.sum() == len(predictor.references_)
    for name in ("pkps", "dkps"):
        space = context.space(name)
        # what the KNN reads for every model, new ones included, is the references' MDS
        # with everyone else placed by their distances to the references that may inform
        # them (not a shadow's own family, not a new model's)
        expected, _ = out_of_sample_fit(
            space.distance_matrix_, inside, space.embedding_.shape[1], context.allowed()
        )
        np.testing.assert_allclose(space.embedding_, expected, atol=1e-8)
        gower = out_of_sample_fit(space.distance_matrix_, inside, space.embedding_.shape[1])[0]
        assert not np.allclose(space.embedding_, gower, atol=1e-6)  # the holdout mattered


def test_the_references_map_does_not_depend_on_the_shadows(cache):
    predictor, *_ = cache
    # DKPS has no bandwidth to choose: the budget-2 and budget-8 profiles' shadows differ
    # in number of responses, and the references sit where their own MDS puts them in both
    maps = []
    for _, calibration in sorted(predictor.profiles_.items()):
        space = calibration.spaces["dkps"]
        inside = np.asarray(space.inside_, dtype=bool)
        maps.append(space.embedding_[inside])
    assert len(maps) == 2
    np.testing.assert_allclose(maps[0], maps[1], atol=1e-8)


def test_the_joint_mds_is_kept_as_an_option(cache):
    _, thin, _, references = cache
    joint = ReferencePredictor(budgets=(2,), modes=("scored",), neighbours="embedding")
    joint.fit(references)
    calibration = next(iter(joint.profiles_.values()))
    assert calibration.spaces["dkps"].inside_ is None  # everyone in one MDS (Eq. 2)
    out = joint.predict(thin)
    assert np.isfinite(out["prediction"]).all()
    with pytest.raises(ValueError, match="neighbours must be one of"):
        ReferencePredictor(neighbours="nearest").fit(references)
