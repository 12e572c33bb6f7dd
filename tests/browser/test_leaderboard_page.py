"""The Leaderboard page in a real browser on a fitted AlpacaEval-40 store: the table, the
legend, the exports and the search's highlight; prints the time from opening the page to
the table shown (first open: placed and kept; a second session: read)."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from app_utils import ROOT, go_to, wait_for_app
from playwright.sync_api import expect

from pkps_core.predictor import stored_predictor
from pkps_core.store import Store

pytestmark = pytest.mark.browser

ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"


def _open_board(session) -> float:
    started = time.perf_counter()
    go_to(session, "Leaderboard")
    expect(session.main.get_by_test_id("stDataFrame")).to_be_visible()
    return time.perf_counter() - started


def test_leaderboard_on_a_fitted_alpaca_eval_store(tmp_path, start_server, new_session):
    if not ALPACA.exists():
        pytest.skip(f"the AlpacaEval cache is not at {ALPACA}")
    path = tmp_path / "alpaca.duckdb"
    with Store(path) as db:
        db.ingest(pd.read_parquet(ALPACA), source="alpaca_eval_40.parquet")
        stored_predictor(db, holdout="family")
    server = start_server(path)

    session = new_session().open(server)
    first = _open_board(session)
    main = session.main
    expect(main.get_by_text("Legend", exact=False).first).to_be_visible()
    for label in ("CSV", "Parquet", "HTML"):
        expect(main.get_by_test_id("stDownloadButton").filter(has_text=label)).to_have_count(1)
    search = main.get_by_test_id("stTextInput").get_by_role("textbox")
    search.fill("claude-2.1_con")
    search.press("Enter")
    wait_for_app(session.page)
    expect(main.get_by_text("claude-2.1_concise").first).to_be_attached()
    session.assert_clean()

    again = new_session().open(server)
    second = _open_board(again)
    again.assert_clean()
    print(
        f"\nLeaderboard on the fitted AlpacaEval-40 store: table shown {first:.2f} s after "
        f"opening the page (first open: placed and kept), {second:.2f} s in a second session"
    )
