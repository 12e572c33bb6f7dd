"""The Leaderboard page in a real browser on a fitted AlpacaEval-40 store: the table, the
legend, the exports and the search's highlight; prints the time from opening the page to
the table shown (the store fitted by `python -m pkps_core fit`, which keeps the table: the
first open reads it; a second session reads Streamlit's cache)."""

from __future__ import annotations

import shutil
import time

import pytest
from app_utils import SCRIPT_TIMEOUT_MS, wait_for_app
from playwright.sync_api import expect

from pkps_core.cli import main as cli

pytestmark = pytest.mark.browser


def _open_board(session) -> tuple[float, float]:
    """Seconds from the click on the page's link to the table shown (its heading and the
    table visible), and to the page's script run finished (``wait_for_app``, which adds
    0.4 s of fixed pauses; the figures below the table come last)."""
    link = session.page.get_by_test_id("stSidebarNavLink").filter(has_text="Leaderboard")
    started = time.perf_counter()
    link.click()
    main = session.main
    # as long as a script run may take (a loaded machine drew the table after more than
    # Playwright's default 5 s); the time is printed, not asserted
    heading = main.get_by_test_id("stHeading").filter(has_text="Leaderboard")
    expect(heading).to_be_visible(timeout=SCRIPT_TIMEOUT_MS)
    expect(main.get_by_test_id("stDataFrame")).to_be_visible(timeout=SCRIPT_TIMEOUT_MS)
    shown = time.perf_counter() - started
    wait_for_app(session.page)
    return shown, time.perf_counter() - started


@pytest.mark.slow
def test_leaderboard_on_a_fitted_alpaca_eval_store(
    alpaca_template, tmp_path, start_server, new_session
):
    path = tmp_path / "alpaca.duckdb"
    shutil.copyfile(alpaca_template, path)  # the run's AlpacaEval store, embedded once
    started = time.perf_counter()
    assert cli(["fit", "--db", str(path)]) == 0  # fits and keeps the leaderboard
    fitted = time.perf_counter() - started
    server = start_server(path)

    session = new_session().open(server)
    first, first_done = _open_board(session)
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
    second, second_done = _open_board(again)
    again.assert_clean()
    print(
        f"\nLeaderboard on the AlpacaEval-40 store fitted by `fit` ({fitted:.1f} s, the table "
        f"kept): table shown {first:.2f} s after the click on the page's link the first "
        f"time (script finished {first_done:.2f} s), {second:.2f} s in a second session "
        f"(finished {second_done:.2f} s)"
    )
