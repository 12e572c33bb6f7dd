"""``streamlit run app.py`` (a checkout) and ``pkps app`` (``perspective_app/main.py``) run
the same app: the same pages, each drawing the same elements."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import ensure_demo_store

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [ROOT / "app.py", ROOT / "perspective_app" / "main.py"]


def _drawn(at: AppTest) -> list[tuple[str, str]]:
    """Every text element of the main area and the sidebar, in order."""
    return [
        (node.type, str(getattr(node, "value", "")))
        for root in (at.main, at.sidebar)
        for node in root
        if node.type in ("title", "header", "subheader", "markdown", "caption", "metric")
    ]


@pytest.mark.slow
def test_app_py_and_the_packaged_main_script_draw_the_same_pages(tmp_path, monkeypatch):
    monkeypatch.setenv("PKPS_STORE", str(ensure_demo_store(tmp_path / "demo.duckdb")))
    drawn = {}
    for script in SCRIPTS:
        at = AppTest.from_file(str(script), default_timeout=300).run()
        pages = [_drawn(at)]
        for page in (shared.DATA_PAGE, shared.LEADERBOARD_PAGE):
            at.switch_page(page).run()
            assert not at.exception, (script.name, page, at.exception)
            pages.append(_drawn(at))
        drawn[script.name] = pages
    home, data, _ = drawn["app.py"]
    assert ("title", "Perspective Explorer") in home and ("title", "Data") in data
    assert drawn["app.py"] == drawn["main.py"]
