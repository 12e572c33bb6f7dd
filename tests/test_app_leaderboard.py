"""AppTest of the Leaderboard page on the demo store (unfitted, then fitted from the page)
and on a sparse AlpacaEval store with a fitted predictor."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import DEMO_SETTINGS, ensure_demo_store
from pkps_core.predictor import stored_predictor
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGE = "perspective_app/app_pages/leaderboard.py"
ALPACA = ROOT.parents[0] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
TIMEOUT = 900

pytestmark = pytest.mark.slow  # fits predictors


def _open(store: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv(shared.STORE_ENV, str(store))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _shows_the_board(at: AppTest, n_models: int) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.dataframe) == 1
    assert len(at.dataframe[0].value) == n_models
    legend = " ".join(m.value for m in at.markdown)
    for kind in ("observed", "estimated", "predicted"):
        assert kind in legend
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["CSV", "Parquet", "HTML"]


def _rank_plot(at: AppTest) -> dict:
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(c for c in charts if c["data"][0]["type"] == "scatter")


def test_demo_store_offers_the_fit_then_shows_the_board(tmp_path, monkeypatch):
    store = ensure_demo_store(tmp_path / "demo.duckdb")
    at = _open(store, monkeypatch)
    fit = [b for b in at.button if b.label == "Fit the reference predictor"]
    assert len(fit) == 1 and not at.dataframe
    fit[0].click().run()
    _shows_the_board(at, DEMO_SETTINGS["n_models"])
    table = at.dataframe[0].value
    # the demo's observed cells carry their given full score; the others are predicted
    first_task = [c for c in table.columns if c.startswith("task-")][0]
    assert table[first_task].str.endswith(" ?").any()
    assert (~table[first_task].str.contains("[?~]")).any()
    with Store(store) as kept:  # the table is kept: a fresh session reads it
        from pkps_core.leaderboard import stored_leaderboard

        assert stored_leaderboard(kept, compute=False) is not None


@pytest.fixture(scope="module")
def sparse_alpaca(tmp_path_factory) -> Path:
    if not ALPACA.exists():
        pytest.skip(f"{ALPACA} is absent")
    import pandas as pd

    from bench.leaderboard_accuracy import sparse_split

    path = tmp_path_factory.mktemp("alpaca") / "sparse.duckdb"
    with Store(path) as store:
        store.ingest(sparse_split(pd.read_parquet(ALPACA), seed=0), source="sparse")
        stored_predictor(store, holdout="family")
    return path


def test_sparse_alpaca_board_with_highlight(sparse_alpaca, monkeypatch):
    at = _open(sparse_alpaca, monkeypatch)
    _shows_the_board(at, 40)
    table = at.dataframe[0].value
    assert set(table["rank"]) <= set(range(1, 41))
    at.text_input(key="leaderboard_search").input("claude-2.1_con").run()
    assert not at.exception
    plot = _rank_plot(at)
    colours = plot["data"][0]["marker"]["color"]
    names = plot["data"][0]["y"]
    assert [n for n, c in zip(names, colours, strict=True) if c == "#d62728"] == [
        "claude-2.1_concise"
    ]
    at.multiselect(key="leaderboard_tasks").select("koala").run()
    assert "koala" in at.dataframe[0].value.columns
    assert "oasst" not in at.dataframe[0].value.columns
