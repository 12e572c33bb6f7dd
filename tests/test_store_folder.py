"""Stores are confined to the store folder, links included: a symlink inside the folder that
points out of it is refused in one line and nothing is created at either end."""

from pathlib import Path

import pytest
from alerts import details
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core import views
from pkps_core.demo import ensure_demo_store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture
def folders(tmp_path) -> tuple[Path, Path]:
    """The store folder and a folder beside it (outside)."""
    inside, outside = tmp_path / "stores", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    return inside, outside


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_link_to_a_file_outside_is_refused_in_one_line(folders):
    inside, outside = folders
    (inside / "link.duckdb").symlink_to(outside / "evil.duckdb")  # dangling: not made yet
    path, problem = views.confined_store_path("link.duckdb", inside)
    assert path is None
    assert "outside the store folder" in problem and "\n" not in problem
    assert not (outside / "evil.duckdb").exists()


def test_a_link_to_a_folder_outside_is_refused(folders):
    inside, outside = folders
    (inside / "shared").symlink_to(outside, target_is_directory=True)
    for name in ("shared/x.duckdb", str(inside / "shared" / "x.duckdb")):
        path, problem = views.confined_store_path(name, inside)
        assert path is None and "outside the store folder" in problem
    assert _files(outside) == []


def test_a_link_that_stays_inside_is_opened_as_its_target(folders):
    inside, _ = folders
    (inside / "real.duckdb").touch()
    (inside / "alias.duckdb").symlink_to(inside / "real.duckdb")
    path, problem = views.confined_store_path("alias.duckdb", inside)
    assert problem is None and path == (inside / "real.duckdb").resolve()


def test_the_sidebar_refuses_a_link_out_and_creates_nothing(folders, monkeypatch):
    inside, outside = folders
    demo = ensure_demo_store(inside / "demo.duckdb")
    monkeypatch.setenv(shared.STORE_ENV, str(demo))
    monkeypatch.setenv("PKPS_DATA_DIR", str(inside))
    (inside / "link.duckdb").symlink_to(outside / "evil.duckdb")
    before = _files(inside.parent)
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.sidebar.text_input[0].set_value("link.duckdb")
    at.sidebar.checkbox(key="switch_create").set_value(True)
    next(b for b in at.sidebar.button if b.label == "Open").click().run()
    assert not at.exception
    refusals = [d for d in details(at) if "outside the store folder" in d]
    assert len(refusals) == 1 and "\n" not in refusals[0]
    assert at.session_state["store_path"] == str(demo)
    assert not (outside / "evil.duckdb").exists()
    assert _files(inside.parent) == before
