"""Every table's columns are explained (issue 18): each page of the app on the demo store
is rendered, and every column of every table must carry a help tooltip."""

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import app_shared as shared
from pkps_core.demo import DATA_DIR_ENV, ensure_demo_store
from pkps_core.views.columns import undocumented

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    shared.DATA_PAGE,
    shared.SPACE_PAGE,
    shared.PREDICTIONS_PAGE,
    shared.EXPERIMENTS_PAGE,
    "app_pages/new_model.py",
]


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    path = folder / "demo.duckdb"
    ensure_demo_store(path)
    return path, folder


def _tables(at: AppTest) -> list[tuple[list[str], dict]]:
    """(columns, column config by name) of every table drawn."""
    out = []
    for frame in at.dataframe:
        value = frame.value
        names = [str(c) for c in value.columns]
        if value.index.name:
            names.append(str(value.index.name))
        config = json.loads(frame.proto.columns or "{}")
        out.append((names, config))
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_column_of_every_table_has_a_tooltip(demo_store, monkeypatch, page):
    path, folder = demo_store
    monkeypatch.setenv("PKPS_STORE", str(path))
    monkeypatch.setenv(DATA_DIR_ENV, str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    at.switch_page(page).run()
    if page == shared.EXPERIMENTS_PAGE:
        next(b for b in at.button if b.label.startswith("Run")).click().run()
    assert not at.exception, [e.message for e in at.exception]
    tables = _tables(at)
    assert tables, f"{page} drew no table"
    for names, config in tables:
        assert undocumented(names) == [], (page, names)
        for name in names:
            entry = config.get(name) or config.get(f"name:{name}") or {}
            if name in [*config, *[k.removeprefix("name:") for k in config]]:
                assert entry.get("help"), (page, name, entry)


def test_pages_draw_tables_only_through_the_helper():
    for path in sorted((ROOT / "app_pages").glob("*.py")):
        assert not re.search(r"\.dataframe\(", path.read_text(encoding="utf-8")), path.name
