"""Uploads in a real browser: new models reach the heatmaps, two sessions at once, the
size limit, and hostile names (SQL, HTML/JS, very long, Unicode) shown as plain text."""

from __future__ import annotations

import tomllib

import pandas as pd
import pytest
from app_utils import (
    ROOT,
    SCRIPT_TIMEOUT_MS,
    go_to,
    import_button,
    plotly_figures,
    upload,
    upload_and_import,
    wait_for_app,
    wait_for_charts,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from pkps_core.store import Store

pytestmark = pytest.mark.browser

SQL = "'); DROP TABLE responses; --"
HTML = "<img src=x onerror=alert(1)>"
LONG = "long-" + "ω" * 1500 + "-end"
UNICODE = "模型🧪 Ωμέγα ñandú עברית\u200f"
MARKUP = '<a href="https://example.com/x">link</a> <b>bold</b><br>next'
HOSTILE_MODELS = [SQL, HTML, LONG, UNICODE, MARKUP]
HOSTILE_TASKS = ["<script>alert('task')</script>", "'; DELETE FROM meta; --"]
HOSTILE_QUERY = "<b onmouseover=alert(2)>bold?</b> '); DROP TABLE embeddings; --"


def cache(
    models: list[str], tasks: list[str], n_queries: int = 4, offset: int = 0, pool: int = 5
) -> bytes:
    """A canonical CSV: every model answers ``n_queries`` of ``pool`` queries per task."""
    rows = []
    for m, model in enumerate(models):
        for t, task in enumerate(tasks):
            for q in range(n_queries):
                qid = f"q{(m + q + offset) % pool}"
                correct = (m + q + t) % 3 != 0
                rows.append(
                    {
                        "model": model,
                        "task": task,
                        "query_id": qid,
                        "query": f"{task} question {qid} about topic {qid}",
                        "response": f"{'right' if correct else 'wrong'} answer {m % 3} {qid}",
                        "score": float(correct),
                    }
                )
    return pd.DataFrame(rows).to_csv(index=False).encode()


def heatmap_rows(page) -> list[list[str]]:
    """The y categories (models) of each heatmap on the Data page."""
    return [
        f["traces"][0]["y"] for f in plotly_figures(page) if f["traces"][0]["type"] == "heatmap"
    ]


def test_uploaded_models_appear_in_both_heatmaps(demo_copy, start_server, new_session):
    server = start_server(demo_copy)
    session = new_session().open(server)
    go_to(session, "Data")
    limit = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"][
        "maxUploadSize"
    ]
    expect(session.main.get_by_text(f"Up to {limit} MB per file")).to_be_visible()
    new_models = [f"newfam/upload-{i}" for i in range(3)]
    upload_and_import(session, ("new.csv", cache(new_models, ["task_00", "task_01"])))
    expect(session.main.get_by_test_id("stAlertContentSuccess")).to_contain_text("Imported")
    wait_for_charts(session.page, 2)
    # the heatmaps drawn before the import's rerun are still on the page for a moment:
    # wait until both are redrawn with the store's new rows
    session.page.wait_for_function(
        """n => { const maps = Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(gd => gd.data && gd.data[0] && gd.data[0].type === 'heatmap');
          return maps.length >= 2 && maps.every(gd => gd.data[0].y.length === n); }""",
        arg=45 + len(new_models),
    )
    coverage, pairedness = heatmap_rows(session.page)
    for model in new_models:
        assert model in coverage
        assert model in pairedness
    assert len(coverage) == 45 + len(new_models)
    session.assert_clean()


@pytest.mark.slow
def test_two_sessions_uploading_at_once_both_land(tmp_path, start_server, new_session):
    store = tmp_path / "shared.duckdb"
    server = start_server(store)
    files = {
        "a.csv": cache([f"alpha/a{i}" for i in range(300)], [f"t{t}" for t in range(30)], 5),
        "b.csv": cache([f"beta/b{i}" for i in range(300)], [f"t{t}" for t in range(30)], 5, 2),
    }
    sessions = {}
    for name, data in files.items():
        session = new_session().open(server)
        go_to(session, "Data")
        upload(session, (name, data))
        sessions[name] = session
    # Both clicks go out before either import has finished (each takes ~1 s).
    for session in sessions.values():
        import_button(session).click()
    for session in sessions.values():
        wait_for_app(session.page)
        # the import's rerun may not have begun when wait_for_app looked (a loaded machine
        # showed the page before it): wait for its message as long as a script run may take
        expect(session.main).to_contain_text("45000 added, 0 replaced", timeout=SCRIPT_TIMEOUT_MS)
        session.assert_clean()
    server.stop()
    with Store(store) as opened:
        summary = opened.summary()
        log = opened.ingest_log()
        keys = opened.records(with_embeddings=False)[["model", "task", "query_id"]]
    assert summary["responses"] == 2 * 300 * 30 * 5
    assert summary["models"] == 600
    assert not keys.duplicated().any()
    assert sorted(log["source"]) == ["a.csv", "b.csv"]
    assert log["added"].tolist() == [45000, 45000]


def test_an_upload_over_the_limit_is_refused_and_says_the_limit(
    tmp_path, start_server, new_session
):
    server = start_server(tmp_path / "limit.duckdb", STREAMLIT_SERVER_MAX_UPLOAD_SIZE="1")
    session = new_session().open(server)
    go_to(session, "Data")
    expect(session.main.get_by_text("Up to 1 MB per file")).to_be_visible()
    models = [f"big/m{i}" for i in range(200)]
    data = cache(models, [f"task{t}" for t in range(40)])
    assert len(data) > 1024**2
    session.page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        [{"name": "big.csv", "mimeType": "text/csv", "buffer": data}]
    )
    expect(session.main.get_by_test_id("stFileUploader").get_by_role("alert")).to_contain_text(
        "File must be 1.0MB or smaller"
    )
    expect(import_button(session)).to_be_disabled()
    session.assert_clean()
    server.stop()
    with Store(tmp_path / "limit.duckdb") as opened:
        assert opened.summary()["responses"] == 0


def _hover_texts(page, figure_index: int) -> list[str]:
    """Hover every point of one scatter and collect the hover labels' text."""
    page.locator(".js-plotly-plot").nth(figure_index).scroll_into_view_if_needed()
    centres = page.evaluate(
        """i => Array.from(document.querySelectorAll('.js-plotly-plot')[i]
                .querySelectorAll('.scatterlayer .point'))
                .map(p => { const r = p.getBoundingClientRect();
                            return [r.x + r.width / 2, r.y + r.height / 2]; })""",
        figure_index,
    )
    texts = []
    label = page.locator(".hoverlayer .hovertext")
    for x, y in centres:
        # Plotly throttles hover events: settle on the point, then nudge the mouse.
        page.mouse.move(x + 1, y + 1)
        page.wait_for_timeout(120)
        page.mouse.move(x, y)
        try:
            label.first.wait_for(timeout=2000)
        except PlaywrightTimeout:
            continue
        texts.append(label.first.text_content())
    return texts


def assert_markup_is_text(page, shown: str) -> None:
    """Plotly drew the markup name as its characters: no link, bold or line break made of
    it anywhere in the charts."""
    assert MARKUP in shown
    charts = page.locator(".js-plotly-plot")
    assert charts.locator("a[href*='example.com']").count() == 0
    assert page.locator("a[href*='example.com']").count() == 0
    bold = charts.locator("text tspan[style*='font-weight:bold']").all_text_contents()
    assert "bold" not in [text.strip() for text in bold], bold  # the page's own bold is fine


def test_hostile_names_are_stored_verbatim_and_shown_as_text(tmp_path, start_server, new_session):
    store = tmp_path / "hostile.duckdb"
    server = start_server(store)
    session = new_session().open(server)
    page = session.page
    go_to(session, "Data")
    models = [*HOSTILE_MODELS, "plain/a", "plain/b"]
    frame = pd.read_csv(__import__("io").BytesIO(cache(models, HOSTILE_TASKS)))
    frame["query"] = HOSTILE_QUERY + " " + frame["query_id"]
    upload_and_import(session, ("hostile.csv", frame.to_csv(index=False).encode()))
    expect(session.main.get_by_test_id("stAlertContentSuccess")).to_contain_text("Imported")

    # Tables: the model table lists every name literally.
    session.main.get_by_text(f"Models ({len(models)})").click()
    # (found by its expander: its later columns, e.g. mean_sample_score, lie beyond the
    # viewport now that the long names' columns are sized to them, and the grid puts
    # only the visible columns in its accessible table)
    expander = session.main.get_by_test_id("stExpander").filter(has_text=f"Models ({len(models)})")
    table = expander.get_by_test_id("stDataFrame")
    expect(table).to_contain_text(SQL)
    text = table.locator("table").inner_text()
    for model in HOSTILE_MODELS:
        assert model.replace("\u200f", "") in text.replace("\u200f", "")
    # Heatmaps: the names are the categories, drawn as text.
    wait_for_charts(page, 2)
    for rows in heatmap_rows(page):
        assert set(HOSTILE_MODELS) <= set(rows)
    axis_text = page.locator(".yaxislayer-above").first.text_content()
    assert HTML in axis_text and SQL in axis_text
    assert_markup_is_text(page, axis_text)
    session.assert_clean()

    go_to(session, "Perspective space")
    wait_for_charts(page, 2)  # the PKPS / DKPS comparison (one figure) and the CV curve
    figures = plotly_figures(page)
    scatter_index = max(
        range(len(figures)), key=lambda i: sum(t["points"] for t in figures[i]["traces"])
    )
    hovers = _hover_texts(page, scatter_index)
    assert len(hovers) >= 4, hovers
    assert any(HTML in h for h in hovers), hovers
    assert any(SQL in h for h in hovers), hovers
    assert any(UNICODE.replace("\u200f", "")[:8] in h for h in hovers), hovers
    assert any(MARKUP in h for h in hovers), hovers
    assert_markup_is_text(page, " ".join(hovers))
    session.assert_clean()

    go_to(session, "Predictions")
    page.get_by_role("tab", name="Export").click()
    with page.expect_download() as download_info:
        page.get_by_test_id("stDownloadButton").filter(has_text="Predictions (CSV)").click()
    exported = pd.read_csv(download_info.value.path(), keep_default_na=False)
    assert set(exported["model"]) == set(models)
    assert set(exported["task"]) == set(HOSTILE_TASKS)
    assert page.locator("img[src='x']").count() == 0
    session.assert_clean()
    assert not session.dialogs

    server.stop()
    with Store(store) as opened:
        records = opened.records(with_embeddings=False)
        assert opened.summary()["responses"] == len(frame)
    assert set(records["model"]) == set(models)
    assert set(records["task"]) == set(HOSTILE_TASKS)
    assert set(records["query"]) == set(frame["query"])
