"""AppTest: failures are said, one line per problem, and nothing is stored or created (issue 19).

Mistyped store paths in "Switch store", several bad files queued together, files that
crash an importer, truncated archives and targets that are not DuckDB files: each gives a
plain message (no traceback, no server temporary paths) and leaves the stores as they were.
"""

import gzip
import json
from pathlib import Path

import pytest
from alerts import detail, details
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core import views
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
GOOD_CSV = (
    b"model,task,query_id,query,response,score\n"
    b"a/one,t,q1,What is 1+1?,2,1\n"
    b"b/two,t,q1,What is 1+1?,3,0\n"
)


def _app() -> AppTest:
    return AppTest.from_file(APP, default_timeout=300)


@pytest.fixture
def demo_store(demo_store, tmp_path, monkeypatch) -> Path:
    """The shared demo store, with the test's folder as the store folder."""
    monkeypatch.setenv("PKPS_DATA_DIR", str(tmp_path))
    return demo_store


def test_a_store_outside_the_store_folder_is_refused_and_not_created(demo_store, tmp_path):
    at = _app().run()
    for outside in ("../elsewhere.duckdb", str(tmp_path.parent / "elsewhere.duckdb")):
        _switch(at, outside, create=True)
        assert not at.exception
        assert "outside the store folder" in _texts(at) or "'..'" in _texts(at)
        assert not (tmp_path.parent / "elsewhere.duckdb").exists()
        assert at.session_state["store_path"] == str(demo_store)


def _switch(at: AppTest, target: str, create: bool = False) -> AppTest:
    at.sidebar.text_input[0].set_value(target)
    at.sidebar.checkbox(key="switch_create").set_value(create)
    next(b for b in at.sidebar.button if b.label == "Open").click().run()
    return at


def _texts(at: AppTest) -> str:
    """What the page says in plain text, alerts' details included."""
    return "\n".join([*(t.value for t in at.text), *details(at)])


def _upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.switch_page(shared.DATA_PAGE).run()
    at.file_uploader(key="data_upload").set_value(
        [(name, data, "application/octet-stream") for name, data in files]
    ).run()
    next(b for b in at.button if b.label == "Import").click().run()
    return at


# ---------------------------------------------------------------------- switch store


def test_a_mistyped_folder_is_refused_and_not_created(demo_store, tmp_path):
    at = _app().run()
    target = tmp_path / "nosuchdir" / "x.duckdb"
    _switch(at, str(target), create=True)
    assert not at.exception
    assert any("Cannot open that store" in e.value for e in at.sidebar.error)
    assert "does not exist" in _texts(at)
    assert not target.parent.exists()
    assert at.session_state["store_path"] == str(demo_store)


def test_a_missing_store_file_is_created_only_when_asked(demo_store, tmp_path):
    at = _app().run()
    target = tmp_path / "new.duckdb"
    _switch(at, str(target))
    assert any("Cannot open that store" in e.value for e in at.sidebar.error)
    assert "There is no store at" in _texts(at)
    assert not target.exists()
    _switch(at, str(target), create=True)
    assert not at.exception
    assert target.exists()
    assert at.session_state["store_path"] == str(target.resolve())


def test_store_path_problem_accepts_existing_stores(tmp_path):
    existing = tmp_path / "s.duckdb"
    Store(existing).close()
    assert views.store_path_problem(str(existing), create=False) is None
    assert views.store_path_problem(str(tmp_path / "n.duckdb"), create=True) is None
    assert "ending in .duckdb" in views.store_path_problem(str(tmp_path / "s.db"), create=True)
    (tmp_path / "dir.duckdb").mkdir()
    assert "folder" in views.store_path_problem(str(tmp_path / "dir.duckdb"), create=True)


# ---------------------------------------------------------------------- uploads


def test_every_bad_file_is_named_and_nothing_is_stored(demo_store):
    before = Store(demo_store).content_hash()
    at = _upload(
        _app().run(),
        ("first.csv", b"model,task\nx,y\n"),
        ("second.csv", b"model,task,query_id,score\na,t,q,lots\n"),
    )
    assert not at.exception
    assert len(at.error) == 1 and "nothing was stored" in at.error[0].value
    assert "2 problems" in at.error[0].value
    lines = detail(at.error[0]).splitlines()
    assert [line.split(":")[0] for line in lines] == ["first.csv", "second.csv"]
    assert Store(demo_store).content_hash() == before


@pytest.mark.parametrize(
    "name, data, expected",
    [
        ("cut.csv.gz", gzip.compress(GOOD_CSV, mtime=0)[:40], "truncated or corrupt gzip"),
        (
            "log.json",
            json.dumps({"eval": {"model": 3}, "samples": [1, "x"]}).encode(),
            "names no model or task",
        ),
        ("bad.parquet", b"not parquet at all", "cannot read"),
    ],
)
def test_a_broken_file_gives_one_line_without_server_paths(demo_store, name, data, expected):
    at = _upload(_app().run(), (name, data))
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.error) == 1 and "nothing was stored" in at.error[0].value
    message = detail(at.error[0])
    assert message.startswith(f"{name}: ") and expected in message
    assert not message.startswith(f"{name}: {name}: ")
    assert "\n" not in message and "pkps-upload-" not in message and "Traceback" not in message


def test_a_target_that_is_not_a_duckdb_file_is_one_line(demo_store, tmp_path):
    impostor = tmp_path / "notes.duckdb"
    impostor.write_text("these are my notes, not a database\n")
    at = _app().run()
    at.switch_page(shared.DATA_PAGE).run()
    at.file_uploader(key="data_upload").set_value([("good.csv", GOOD_CSV, "text/csv")]).run()
    at.radio[0].set_value("a new store").run()
    next(t for t in at.main.text_input if t.label.startswith("New store file")).set_value(
        str(impostor)
    )
    next(b for b in at.button if b.label == "Import").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.error) == 1 and "nothing was stored" in at.error[0].value
    assert str(impostor) in detail(at.error[0])
    assert impostor.read_text().startswith("these are my notes")
