"""Issue 18's round trip: a cache written to CSV with pandas and uploaded through the Data
page's widget gives the same store as importing the same cache as Parquet — on the
AlpacaEval cache (real models sometimes answer with an empty string) and on the demo."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from app_utils import ROOT, go_to, upload_and_import
from playwright.sync_api import expect

from pkps_core.demo import demo_records
from pkps_core.store import Store

pytestmark = pytest.mark.browser

ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"


def _upload_csv_and_compare(frame, csv: bytes, tmp_path, start_server, new_session) -> None:
    uploaded = tmp_path / "from_csv.duckdb"
    server = start_server(uploaded)
    session = new_session().open(server)
    go_to(session, "Data")
    upload_and_import(session, ("cache.csv", csv))
    expect(session.main.get_by_test_id("stAlertContentSuccess")).to_contain_text("Imported")
    session.assert_clean()
    server.stop()
    with Store(tmp_path / "from_parquet.duckdb") as parquet:
        parquet.ingest(frame, source="cache.parquet")
        expected_hash = parquet.content_hash()
        expected = parquet.records(with_embeddings=False)
    with Store(uploaded) as store:
        assert store.content_hash() == expected_hash
        pd.testing.assert_frame_equal(store.records(with_embeddings=False), expected)


@pytest.mark.slow
def test_alpaca_eval_as_csv_uploads_to_the_parquet_store(tmp_path, start_server, new_session):
    if not ALPACA.exists():
        pytest.skip(f"the AlpacaEval cache is not at {ALPACA}")
    frame = pd.read_parquet(ALPACA)
    assert (frame["response"] == "").any(), "the case the test is for: empty answers"
    csv = frame.to_csv(index=False).encode()
    _upload_csv_and_compare(frame, csv, tmp_path, start_server, new_session)


def test_demo_cache_as_csv_uploads_to_the_parquet_store(tmp_path, start_server, new_session):
    frame = demo_records()
    written = frame.copy()
    for column in ("query_embedding", "response_embedding"):  # JSON arrays, exact floats
        written[column] = [json.dumps([float(x) for x in v]) for v in written[column]]
    csv = written.to_csv(index=False).encode()
    _upload_csv_and_compare(frame, csv, tmp_path, start_server, new_session)
