"""Reliability: a server killed mid-ingest, a 1,000,000-row upload."""

from __future__ import annotations

import json
import time

import pytest
from app_utils import (
    ROOT,
    go_to,
    import_button,
    upload,
    wait_for_app,
    wait_for_uploaded,
    watch,
    watched,
)
from playwright.sync_api import expect

from bench.caches import make_text_records
from pkps_core.store import Store

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "artifacts"


@pytest.mark.slow
def test_server_killed_mid_ingest_restarts_with_all_or_none(
    demo_copy, start_server, new_session, tmp_path
):
    """Driven through the app: the upload is imported, and the server is SIGKILLed as soon
    as the page says the rows are being stored (inside ``Store.ingest``)."""
    with Store(demo_copy) as before:
        before_hash, before_rows = before.content_hash(), before.summary()["responses"]
    frame = make_text_records(400, 5, 150, 3000, seed=3)
    server = start_server(demo_copy)
    session = new_session().open(server)
    go_to(session, "Data")
    upload(session, ("crash.csv", frame.to_csv(index=False).encode()))
    import_button(session).click()
    session.main.get_by_text(f"Storing {len(frame):,} rows in one transaction").wait_for()
    session.page.wait_for_timeout(300)
    server.kill()

    with Store(demo_copy) as after:
        rows = after.summary()["responses"]
        log = after.ingest_log()
        outcome = "none" if after.content_hash() == before_hash else "all"
    assert rows in (before_rows, before_rows + len(frame)), rows
    assert (outcome == "all") == (rows == before_rows + len(frame))
    assert ("crash.csv" in set(log["source"])) == (outcome == "all")
    _record("crash", {"outcome": outcome, "rows_in_file": len(frame), "rows_after": rows})

    restarted = start_server(demo_copy)
    session = new_session().open(restarted)
    go_to(session, "Data")
    expect(session.main.get_by_test_id("stMetricValue").nth(3)).to_have_text(f"{rows:,}")
    session.assert_clean()


@pytest.mark.slow
def test_a_million_rows_ingest_with_progress(tmp_path, start_server, new_session):
    """A 1,000,000-row CSV (63 MB: 1000 models × 4 tasks × 250 queries, ~10 models per
    query) uploaded and imported through the app; reports time and the server's peak
    memory (VmHWM) in ``artifacts/measurements.json``."""
    csv = tmp_path / "million.csv"
    make_text_records(1000, 4, 250, 25_000, seed=4).to_csv(csv, index=False)
    store = tmp_path / "million.duckdb"
    server = start_server(store)
    session = new_session().open(server)
    page = session.page
    go_to(session, "Data")
    # Playwright passes buffers over 50 MB only as files.
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(csv))
    wait_for_uploaded(page, [csv.name])
    watch(page, "[data-testid='stExpander']", "import_stages")
    started = time.monotonic()
    import_button(session).click()
    expect(session.main.get_by_test_id("stAlertContentSuccess")).to_contain_text(
        "Imported", timeout=600_000
    )
    seconds = time.monotonic() - started
    wait_for_app(page, timeout=600_000)
    expect(session.main).to_contain_text("million.csv: 1000000 added")
    expect(session.main.get_by_test_id("stMetricValue").nth(3)).to_have_text("1,000,000")
    stages = "\n".join(watched(page, "import_stages"))
    for stage in (
        "Reading and validating the files",
        "Storing 1,000,000 rows in one transaction",
        "Embedding new texts",
    ):
        assert stage in stages, stages
    peak = server.peak_rss_mb()
    session.assert_clean()
    _record(
        "ingest_1m",
        {
            "rows": 1_000_000,
            "csv_mb": round(csv.stat().st_size / 1e6, 1),
            "seconds_click_to_imported": round(seconds, 1),
            "server_peak_rss_mb": round(peak),
        },
    )
    assert peak < 6 * 1024, f"peak memory {peak:.0f} MiB"


def _record(name: str, values: dict) -> None:
    """Add measurements to ``artifacts/measurements.json`` (git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "measurements.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = values
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{name}: {values}")
