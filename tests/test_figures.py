"""The pages' figures built in the library (views/figures.py, views/experiment_figures.py,
views/leaderboard_figures.py), tested without the app: issue 38's smaller points, and the
Leaderboard page's figures against the leaderboard they draw."""

import itertools

import numpy as np
import pandas as pd
import pytest

from pkps_core import protocols, views
from pkps_core.leaderboard import build_leaderboard, task_column
from pkps_core.views import experiment_figures, figures, leaderboard_figures


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


HOSTILE_MODEL = "<b>x</b>"
HOSTILE_TASK = "<a href='https://example.com'>t</a>"


@pytest.fixture(scope="module")
def board():
    """A thin graded store (under half the cells observed: the logit fill, no predictor),
    with a model and a task whose names are markup."""
    rng = np.random.default_rng(7)
    models = [HOSTILE_MODEL, *(f"fam{i % 3}/m{i}" for i in range(1, 8))]
    tasks = [HOSTILE_TASK, "model", "t2", "t3"]  # "model" clashes with a model column
    ability = dict(zip(models, rng.normal(0, 1, len(models)), strict=True))
    cells = {
        (m, t)
        for m in models
        for t in rng.choice(tasks, 1 + int(rng.random() < 0.5), replace=False)
    }
    rows = []
    for model, task in sorted(cells | {(HOSTILE_MODEL, "t2")}):
        # the hostile model answers every query of t2 (an observed cell), others 4 of 6
        queries = (
            range(6) if (model, task) == (HOSTILE_MODEL, "t2") else rng.choice(6, 4, replace=False)
        )
        for query in queries:
            logit = ability[model] + rng.normal(0, 1)
            rows.append((model, task, f"q{query}", 1 / (1 + np.exp(-logit))))
    records = pd.DataFrame(rows, columns=["model", "task", "query_id", "score"])
    records["family"] = records["model"].str.split("/").str[0]
    built = build_leaderboard(records)
    assert set(built.cells["kind"]) == {"observed", "estimated", "predicted"}
    return built


def test_the_rank_plot_has_one_point_per_model_by_overall_score_with_its_interval(board):
    models = board.models.sample(frac=1.0, random_state=0)  # the plot orders, not the input
    figure = leaderboard_figures.rank_figure(models, highlight=HOSTILE_MODEL, level=board.level)
    (points,) = figure.data
    order = board.models.sort_values("overall")
    assert list(points.y) == [m.replace("<", "&lt;").replace(">", "&gt;") for m in order["model"]]
    np.testing.assert_allclose(points.x, order["overall"])
    assert np.all(np.diff(np.asarray(points.x)) >= 0)
    np.testing.assert_allclose(points.error_x.array, order["upper"] - order["overall"])
    np.testing.assert_allclose(points.error_x.arrayminus, order["overall"] - order["lower"])
    assert np.asarray(points.error_x.array).max() > 0  # the filled models have a real interval
    assert HOSTILE_MODEL not in points.y and "&lt;b&gt;x&lt;/b&gt;" in points.y
    red = [y for y, c in zip(points.y, points.marker.color, strict=True) if c == "#d62728"]
    assert red == ["&lt;b&gt;x&lt;/b&gt;"]
    assert figure.layout.xaxis.title.text == "overall score (90% interval)"


def test_the_cell_map_draws_the_table_values_in_the_rows_given(board):
    wide = board.wide().set_index("model")
    wide = wide.loc[list(reversed(wide.index))]  # the page's table order, whatever it is
    tasks = board.tasks
    figure = leaderboard_figures.cell_map_figure(wide, tasks)
    (cells,) = figure.data
    expected = wide[[task_column(t) for t in tasks]].to_numpy(dtype=float)
    np.testing.assert_array_equal(np.asarray(cells.z, dtype=float), expected)
    assert "model" in tasks and task_column("model") == "task model"
    assert list(cells.y) == [m.replace("<", "&lt;").replace(">", "&gt;") for m in wide.index]
    assert HOSTILE_TASK not in cells.x
    assert "&lt;a href='https://example.com'&gt;t&lt;/a&gt;" in cells.x
    kinds = wide[[f"{task_column(t)} kind" for t in tasks]].to_numpy(dtype=str)
    marks = np.asarray(cells.text)
    assert all(m.endswith(" ?") for m in marks[kinds == "predicted"])
    assert not any(m.endswith((" ?", " ~")) for m in marks[kinds == "observed"])
    assert all(
        h.startswith(("observed ", "estimated ", "predicted ")) for h in np.ravel(cells.customdata)
    )
