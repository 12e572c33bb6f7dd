"""No clipped labels in tables (issue 19, Finish): on every page of the demo store, every
``st.dataframe`` grid's columns are wide enough for their header (with the column menu the
header shows on hover) and for the text of every cell, measured with the canvas's own
``measureText`` in the grid's own fonts.

The grid is drawn on a canvas, so the widths and texts come from the glide data grid's
React props (the canvas's fiber): per column its drawn ``width`` and ``title``, and per
cell ``getCellContent`` — the text as drawn (``displayData``), for every row, not only the
rows scrolled into view. On the demo store no cell is cut, not even in columns capped at
:data:`pkps_core.views.widths.MAX_WIDTH` (long free text): the cell table's
``extrapolation_reason`` shows the checks' short labels, not their full reasons.
"""

from __future__ import annotations

import pytest
from app_utils import SCRIPT_TIMEOUT_MS, go_to, wait_for_app

pytestmark = pytest.mark.browser

# Glide data grid's header: the title starts one padding in; with the menu shown (on
# hover) the title fades out over the column's last 35 px.
HEADER_MENU = 35
MEASURE = """async (menu) => {
    await document.fonts.ready;
    const ctx = document.createElement("canvas").getContext("2d");
    const width = (text, font) => { ctx.font = font; return ctx.measureText(text).width; };
    const props = (canvas, test) => {
        let fiber = canvas[Object.keys(canvas).find(k => k.startsWith("__reactFiber"))];
        for (; fiber; fiber = fiber.return)
            if (fiber.memoizedProps && test(fiber.memoizedProps)) return fiber.memoizedProps;
        return null;
    };
    const grids = [];
    for (const frame of document.querySelectorAll("[data-testid='stDataFrame']")) {
        if (frame.offsetParent === null) continue;  // in a closed expander or another tab
        const canvas = frame.querySelector("canvas[data-testid='data-grid-canvas']");
        if (!canvas) continue;
        const grid = props(canvas, p => p.columns && p.getCellRenderer && p.getCellContent);
        const theme = grid.theme;
        const pad = theme.cellHorizontalPadding;
        const headerFont = theme.headerFontFull || `${theme.headerFontStyle} ${theme.fontFamily}`;
        const cellFont = theme.baseFontFull || `${theme.baseFontStyle} ${theme.fontFamily}`;
        const cut = [];
        let cells = 0;
        grid.columns.forEach((column, i) => {
            const title = column.title || "";
            const text = width(title, headerFont) + pad;
            if (text + menu > column.width)
                cut.push({kind: text > column.width ? "header" : "header on hover",
                          header: title, text: title, need: Math.ceil(text + menu),
                          width: column.width});
            for (let row = 0; row < grid.rows; row++) {
                const cell = grid.getCellContent([i, row]);
                let need = 0, text = "";
                if (cell.kind === "bubble") {
                    text = cell.data.join(" | ");
                    need = cell.data.reduce((s, t) => s + width(t, cellFont)
                        + 2 * theme.bubblePadding + theme.bubbleMargin, 0) + 2 * pad;
                } else if (cell.kind === "boolean") {
                    continue;
                } else {
                    text = String(
                        cell.displayData ?? cell.data?.displayDate ?? cell.copyData ?? "");
                    need = width(text, cellFont) + 2 * pad;
                }
                cells += 1;
                if (need > column.width)
                    cut.push({kind: "cell", header: title, text, need: Math.ceil(need),
                              width: column.width});
            }
        });
        grids.push({columns: grid.columns.map(c => c.title), cells, cut});
    }
    return grids;
}"""


def _open_everything(page) -> None:
    """Open every closed expander of the main area (tables sit in some of them)."""
    page.evaluate(
        """() => document.querySelectorAll("[data-testid='stMain'] details:not([open]) > summary")
            .forEach(summary => summary.offsetParent !== null && summary.click())"""
    )
    wait_for_app(page)


# Every shown grid's canvas with its props: the grids draw after the script run ends.
DRAWN = """() => Array.from(document.querySelectorAll("[data-testid='stDataFrame']"))
    .filter(frame => frame.offsetParent !== null)
    .every(frame => {
        const canvas = frame.querySelector("canvas[data-testid='data-grid-canvas']");
        return canvas && Object.keys(canvas).some(k => k.startsWith("__reactFiber"));
    })"""


def _measure(page, title: str, seen: dict) -> None:
    """Measure the shown grids once they are drawn and their columns have settled: two
    measurements 150 ms apart that agree (a fixed 800 ms wait before: 31.7 against 22.7 s for
    the test alone, the same tables and cells measured)."""
    page.wait_for_function(DRAWN, timeout=SCRIPT_TIMEOUT_MS)
    grids = page.evaluate(MEASURE, HEADER_MENU)
    for _ in range(20):
        page.wait_for_timeout(150)
        again = page.evaluate(MEASURE, HEADER_MENU)
        if again == grids:
            break
        grids = again
    else:
        raise AssertionError(f"{title}: the tables' columns kept changing for 3 s")
    for grid in grids:
        seen.setdefault((title, tuple(grid["columns"])), grid)


def _run_experiment(page) -> None:
    seeds = page.get_by_test_id("stNumberInput").filter(has_text="Seeds").locator("input")
    seeds.fill("2")
    page.get_by_test_id("stFormSubmitButton").filter(has_text="Run").locator("button").click()
    wait_for_app(page)
    page.get_by_test_id("stDataFrame").first.wait_for()


PAGES = ["Data", "New model", "Perspective space", "Predictions", "Experiments"]


@pytest.mark.slow
def test_no_table_header_or_cell_is_clipped_on_any_page(demo_server, new_session):
    session = new_session().open(demo_server)
    page = session.page
    seen: dict = {}
    for title in PAGES:
        go_to(session, title)
        if title == "Experiments":
            _run_experiment(page)
        _open_everything(page)
        tabs = session.main.get_by_role("tab").all()
        for tab in tabs or [None]:
            if tab is not None:
                tab.click()
                wait_for_app(page)
                _open_everything(page)
            _measure(page, title, seen)
    print(f"\n{len(seen)} tables, {sum(g['cells'] for g in seen.values())} cells measured")
    pages = {title for title, _ in seen}
    assert pages == set(PAGES), f"tables seen on {sorted(pages)} only"
    assert len(seen) >= 15, f"only {len(seen)} tables seen: {list(seen)}"
    assert sum(grid["cells"] for grid in seen.values()) >= 1000
    cut = {f"{title}: {', '.join(columns)}": grid["cut"] for (title, columns), grid in seen.items()}
    cut = {table: found for table, found in cut.items() if found}
    assert not cut, _describe(cut)
    session.assert_clean()


def _describe(cut: dict) -> str:
    def counts(found: list) -> str:
        kinds = [f["kind"] for f in found]
        return (
            f"{kinds.count('header')} header(s) cut, {kinds.count('header on hover')} more "
            f"under the column menu on hover, {kinds.count('cell')} cell(s) cut"
        )

    pages: dict[str, list] = {}
    for table, found in cut.items():
        pages.setdefault(table.split(":")[0], []).extend(found)
    lines = [f"in {len(cut)} table(s): " + counts([f for v in cut.values() for f in v])]
    lines += [f"  {page}: {counts(found)}" for page, found in pages.items()]
    order = {"header": 0, "cell": 1, "header on hover": 2}
    for table, found in cut.items():
        found = sorted(found, key=lambda f: order[f["kind"]])
        lines.append(f"  {table}")
        lines += [
            f"    {f['kind']} {f['header']!r}: {f['text']!r} needs {f['need']} px of {f['width']}"
            for f in found[:8]
        ]
        if len(found) > 8:
            lines.append(f"    … and {len(found) - 8} more")
    return "\n".join(lines)
