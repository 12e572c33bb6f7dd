"""Every table's columns are explained (issue 18) and wide enough (issue 19): each page of
the app on the demo store is rendered once, and every column of every table must carry a
help tooltip and a pixel width that fits its header and its longest cell."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import DATA_DIR_ENV, ensure_demo_store
from pkps_core.views.columns import undocumented
from pkps_core.views.widths import INDEX, MAX_WIDTH, display_texts, header_width, required_width

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    shared.DATA_PAGE,
    shared.SPACE_PAGE,
    shared.PREDICTIONS_PAGE,
    shared.EXPERIMENTS_PAGE,
    "perspective_app/app_pages/new_model.py",  # relative to app.py, as a test names it
]
PAGE_IDS = [Path(page).stem for page in PAGES]  # the pages' paths are absolute


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    path = folder / "demo.duckdb"
    ensure_demo_store(path)
    return path, folder


@pytest.fixture(scope="module")
def rendered(demo_store):
    """``rendered(page)``: the page run once on the demo store (the Experiments page with
    its Run pressed), shared by this module's tests."""
    path, folder = demo_store
    done: dict[str, AppTest] = {}

    def render(page: str) -> AppTest:
        if page not in done:
            with pytest.MonkeyPatch.context() as monkeypatch:
                monkeypatch.setenv("PKPS_STORE", str(path))
                monkeypatch.setenv(DATA_DIR_ENV, str(folder))
                at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
                at.switch_page(page).run()
                if page == shared.EXPERIMENTS_PAGE:  # two seeds: the same tables, half the work
                    at.number_input(key="exp_seeds").set_value(2)
                    next(b for b in at.button if b.label.startswith("Run")).click().run()
            assert not at.exception, [e.message for e in at.exception]
            done[page] = at
        return done[page]

    return render


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


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_column_of_every_table_has_a_tooltip(rendered, page):
    at = rendered(page)
    tables = _tables(at)
    assert tables, f"{page} drew no table"
    for names, config in tables:
        assert undocumented(names) == [], (page, names)
        for name in names:
            entry = config.get(name) or config.get(f"name:{name}") or {}
            if name in [*config, *[k.removeprefix("name:") for k in config]]:
                assert entry.get("help"), (page, name, entry)


def _shown_columns(frame) -> list[tuple[str, object, list]]:
    """(config key, config entry, displayed texts) of every column a table shows, the
    index included unless hidden; a pandas Styler's cells as its display values."""
    value = frame.value
    config = json.loads(frame.proto.columns or "{}")
    styled = frame.proto.arrow_data.styler.display_values
    shown = convert_arrow_bytes_to_pandas_df(styled) if styled else None
    out = []
    for position, name in enumerate(value.columns):
        entry = config.get(str(name), {})
        if entry.get("hidden"):
            continue
        fmt = (entry.get("type_config") or {}).get("format")
        if shown is not None and not fmt:
            texts = [str(t) for t in shown.iloc[:, position] if pd.notna(t)]
        else:
            texts = display_texts(value[name], fmt)
        out.append((str(name), entry, texts))
    index_entry = config.get(INDEX, {})
    if not index_entry.get("hidden"):
        for level, name in enumerate(value.index.names):
            key = str(name) if name is not None else INDEX
            entry = {**index_entry, **config.get(key, {})}
            out.append((key, entry, display_texts(pd.Series(value.index.get_level_values(level)))))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_column_of_every_table_fits_its_header_and_cells(rendered, page):
    """Each column has a width in px at least the estimated width of its header (with the
    grid's padding and column menu) and of its longest displayed cell text; long free
    text may be capped at MAX_WIDTH (its header may not)."""
    at = rendered(page)
    assert at.dataframe, f"{page} drew no table"
    narrow, checked = [], 0
    for frame in at.dataframe:
        for key, entry, texts in _shown_columns(frame):
            label = entry.get("label") or ("" if key == INDEX else key)
            width = entry.get("width")
            need = max(header_width(label), min(required_width(label, texts), MAX_WIDTH))
            checked += 1
            if not isinstance(width, int) or width < need:
                narrow.append(f"{key!r}: width {width!r}, needs {need} px")
    assert checked >= 4, f"{page}: only {checked} columns checked"
    assert not narrow, (page, narrow)


def test_pages_draw_tables_only_through_the_helper():
    for path in sorted((ROOT / "perspective_app" / "app_pages").glob("*.py")):
        assert not re.search(r"\.dataframe\(", path.read_text(encoding="utf-8")), path.name
