"""The Data page's family table in a real browser (issue 19, Families): a family edited in
the table and saved is in the store and still there after a reload."""

from __future__ import annotations

import pytest
from app_utils import go_to, wait_for_app
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from pkps_core.store import Store, families

pytestmark = pytest.mark.browser

NEW_FAMILY = "edited-in-browser"
ROW_HEIGHT = 35  # the data grid's default row (and header) height in px


def _family_editor(session):
    expander = session.main.get_by_test_id("stExpander").filter(has_text="see and edit")
    if expander.locator("details").first.get_attribute("open") is None:
        expander.locator("summary").click()
    grid = expander.get_by_test_id("stDataFrame")
    grid.wait_for()
    return expander, grid


def _grid_text(grid) -> str:
    """The grid's cells as text: the data grid mirrors them in an accessible table."""
    return grid.locator("table").inner_text()


def test_a_family_edited_and_saved_survives_a_reload(demo_copy, start_server, new_session):
    server = start_server(demo_copy)
    with Store(demo_copy, read_only=True) as store:
        before = families.family_table(store)
    model = before["model"].iloc[0]
    assert before["family"].iloc[0] != NEW_FAMILY

    session = new_session().open(server)
    go_to(session, "Data")
    page = session.page
    expander, grid = _family_editor(session)
    save = expander.get_by_test_id("stButton").filter(has_text="Save the families")
    expect(save.locator("button")).to_be_disabled()  # nothing changed yet

    # the first row's family: click its model cell, step right, open the cell's editor
    # (Enter), replace its text, commit (Enter). The grid is drawn on a canvas: wait until
    # it shows its rows, and try again when the step right was lost (in a full run the
    # grid was still taking the click, and Enter opened the read-only model cell).
    expect(grid.locator("table")).to_contain_text(model)
    wait_for_app(page)
    # enabled only: a read-only model cell opens a disabled editor (the step right lost)
    editor = page.locator("#portal textarea:not([disabled]), #portal input:not([disabled])").first
    for attempt in range(3):
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 40, box["y"] + ROW_HEIGHT * 1.5)
        page.wait_for_timeout(300)  # the grid takes the click's selection first
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(300)
        page.keyboard.press("Enter")
        try:
            editor.wait_for(timeout=10_000)
            break
        except PlaywrightTimeoutError:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_for_app(page)
    editor.fill(NEW_FAMILY)
    page.keyboard.press("Enter")
    wait_for_app(page)
    expect(save.locator("button")).to_be_enabled()
    save.locator("button").click()
    wait_for_app(page)
    saved = session.main.get_by_test_id("stAlert").filter(has_text="Saved: 1 model")
    expect(saved).to_be_visible()

    with Store(demo_copy, read_only=True) as store:
        after = families.family_table(store).set_index("model")
    assert after.loc[model, "family"] == NEW_FAMILY
    assert after.loc[model, "derived"] == families.EDITED
    untouched = before.set_index("model").drop(index=model)["family"]
    assert after.drop(index=model)["family"].equals(untouched)

    # load the app afresh (a new script session: nothing kept in memory) and come back;
    # reloading the /data URL itself would make Streamlit probe /data/_stcore/health (404)
    session.open(server)
    go_to(session, "Data")
    _, grid = _family_editor(session)
    expect(grid.locator("table")).to_contain_text(NEW_FAMILY)
    assert model in _grid_text(grid)
    session.assert_clean()
