"""The pages' figures built in the library (views/figures.py, views/experiment_figures.py),
tested without the app: issue 38's smaller points."""

import itertools

import numpy as np
import pandas as pd

from pkps_core import protocols, views
from pkps_core.views import experiment_figures, figures


def _result(levers: dict[str, list]) -> protocols.ProtocolResult:
    names = list(levers)
    rows = [
        {**dict(zip(names, values, strict=True)), "method": method, "mae": 0.1, "sem": 0.01}
        for values in itertools.product(*levers.values())
        for method in ("sample", "pkps")
    ]
    summary = pd.DataFrame(rows)
    return protocols.ProtocolResult(
        "new-model", tuple(names), pd.DataFrame(), summary, pd.DataFrame()
    )


def test_facets_are_titled_by_their_setting_and_budgets_tick_at_the_values_run():
    result = _result({"budget": [1, 2, 4, 8, 16], "mode": ["scored", "responses-only"]})
    figure = experiment_figures.mae_figure(result, "budget")
    titles = [a.text for a in figure.layout.annotations]
    assert titles and all("=" not in t for t in titles), titles
    assert any(t.endswith("responses-only") for t in titles)
    assert list(figure.layout.xaxis.tickvals) == [1, 2, 4, 8, 16]
    assert figure.layout.xaxis.type == "log"


def test_the_new_model_methods_have_clearly_different_colours():
    methods = protocols.DEFAULT_METHODS["new-model"]
    rgb = {
        m: np.array([int(views.METHOD_COLOURS[m][i : i + 2], 16) for i in (1, 3, 5)])
        for m in methods
    }
    closest = min(np.linalg.norm(rgb[a] - rgb[b]) for a, b in itertools.combinations(methods, 2))
    assert closest > 60, closest


def test_a_complete_cache_is_one_colour_and_said_so():
    counts = pd.DataFrame({"t1": [805.0, 805.0], "t2": [20.0, 20.0]}, index=["a", "b"])
    figure, complete = figures.coverage_figure(counts)
    assert complete
    assert np.allclose(np.asarray(figure.data[0].z, dtype=float), 1.0)  # no stripe per task
    assert "responses %{customdata[2]:,.0f}" in figure.data[0].hovertemplate
    counts.loc["b", "t2"] = np.nan
    assert not figures.coverage_figure(counts)[1]
