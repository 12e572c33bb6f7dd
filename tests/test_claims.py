"""The PKPS paper's Figure 2a–b claims on its synthetic data, with fixed seeds.

At rho = 0 (no shared queries) PKPS beats DKPS and the sample score at small budgets,
and PKPS is flat in the pairing rho (within 15 % between rho = 0 and rho = 1).
"""

import pytest

from pkps_core.protocols import synthetic_query_efficiency

pytestmark = pytest.mark.slow  # the module's fits: ~25 s setup


@pytest.fixture(scope="module")
def results():
    return synthetic_query_efficiency(budgets=(1, 2, 4), rhos=(0.0, 0.5, 1.0), seeds=range(10))


@pytest.mark.parametrize("budget", [1, 2])
def test_pkps_beats_dkps_and_sample_when_unpaired(results, budget):
    mae = results[(results.rho == 0.0) & (results.budget == budget)]
    mean = mae.groupby("method").mae.mean()
    assert mean["pkps"] < mean["dkps"]
    assert mean["pkps"] < mean["sample"]
    # not just on average: PKPS wins on most seeds
    wide = mae.pivot(index="seed", columns="method", values="mae")
    assert (wide.pkps < wide.dkps).mean() >= 0.8
    assert (wide.pkps < wide["sample"]).mean() >= 0.8


@pytest.mark.parametrize("budget", [1, 2])
def test_pkps_is_flat_in_pairing(results, budget):
    mean = results[results.budget == budget].groupby(["rho", "method"]).mae.mean()
    unpaired, paired = mean[(0.0, "pkps")], mean[(1.0, "pkps")]
    assert abs(unpaired - paired) / paired < 0.15


def test_pkps_never_worse_than_dkps_across_budget_and_pairing(results):
    mean = results.groupby(["budget", "rho", "method"]).mae.mean().unstack("method")
    # with shared queries the CV can pick the delta limit, so the two tie up to seed noise
    # (SEM ~ 0.003 here); without them PKPS is far better
    assert (mean.pkps <= mean.dkps + 0.005).all(), mean
    assert (mean.loc[(slice(None), 0.0), "pkps"] < 0.6 * mean.loc[(slice(None), 0.0), "dkps"]).all()


@pytest.mark.parametrize("budget", [2, 4])
def test_dkps_worse_than_sample_when_unpaired(results, budget):
    # at m = 1 the binary sample score is so noisy (MAE ~0.33) that even DKPS's
    # uninformed neighbours beat it; from m = 2 on the paper's claim holds
    mean = results[(results.rho == 0.0) & (results.budget == budget)].groupby("method").mae.mean()
    assert mean["dkps"] > mean["sample"]


def test_dkps_needs_shared_queries(results):
    mean = results.groupby(["rho", "method"]).mae.mean()
    assert mean[(0.0, "dkps")] > 1.3 * mean[(1.0, "dkps")]
