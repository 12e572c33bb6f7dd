"""Families: derived, shown, edited and kept in the store (issue 19)."""

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.records import RecordsError
from pkps_core.store import Store, families

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval" / "alpaca_eval_40.parquet"
MODELS = ["gpt-3.5-turbo", "gpt4_0613", "vicuna-13b", "vicuna-7b", "meta/llama-3", "claude"]


def _records() -> pd.DataFrame:
    rows = [
        {
            "model": m,
            "task": "t",
            "query_id": str(q),
            "query": f"q{q}",
            "response": f"{m} {q}",
            "score": float((i + q) % 2),
        }
        for i, m in enumerate(MODELS)
        for q in range(3)
    ]
    frame = pd.DataFrame(rows)
    frame["family"] = [
        "anthropic" if m == "claude" else None for m in frame["model"]
    ]  # one family given by the data, the others by the prefix rule
    frame["family"] = frame["family"].fillna(frame["model"].map(families.default_family))
    return frame


@pytest.fixture
def store(tmp_path) -> Store:
    with Store(tmp_path / "f.duckdb") as opened:
        opened.ingest(_records())
        yield opened


def test_family_table_says_how_each_family_was_derived(store):
    table = families.family_table(store).set_index("model")
    assert table.loc["claude", "derived"] == families.FROM_DATA
    assert table.loc["vicuna-13b", "derived"] == families.PREFIX_RULE
    assert table.loc["gpt4_0613", "family"] == "gpt4"
    assert table.loc["gpt4_0613", "suggested"] == "gpt"
    assert table.loc["meta/llama-3", "suggested"] == "meta"
    note = families.derivation_note(table.reset_index())
    assert note.startswith(
        "6 families for 6 models. Each model's family: 5 by the prefix rule, 1 from the data."
    )


def test_set_families_rewrites_rows_keeps_the_edit_and_bumps_the_version(store):
    version = store.version
    assert families.set_families(store, {"vicuna-13b": "vicuna", "vicuna-7b": "vicuna"}) == 2
    assert store.version == version + 1
    records = store.records(with_embeddings=False)
    assert set(records.loc[records["model"].str.startswith("vicuna"), "family"]) == {"vicuna"}
    table = families.family_table(store).set_index("model")
    assert table.loc["vicuna-7b", "derived"] == families.EDITED
    assert families.set_families(store, {"vicuna-7b": "vicuna"}) == 0
    assert store.version == version + 1

    # a re-import brings back the data's family; the saved edit is restored
    store.ingest(_records())
    assert families.reapply_families(store) == 2
    assert families.family_table(store).set_index("model").loc["vicuna-7b", "family"] == "vicuna"


def test_set_families_refuses_empty_names_and_unknown_models(store):
    version = store.version
    with pytest.raises(RecordsError, match="cannot be empty"):
        families.set_families(store, {"claude": " "})
    with pytest.raises(RecordsError, match="no model 'nobody'"):
        families.set_families(store, {"nobody": "x"})
    assert store.version == version


def test_data_page_shows_families_and_applies_the_suggestions(tmp_path, monkeypatch):
    path = tmp_path / "app.duckdb"
    with Store(path) as opened:
        opened.ingest(_records())
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.switch_page(shared.DATA_PAGE).run()
    assert not at.exception
    assert any(c.value.startswith("Families: 6 families for 6 models") for c in at.caption)
    next(b for b in at.button if b.label == "Use the suggested families").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("model(s) changed family" in s.value for s in at.success)
    assert any(c.value.startswith("Families: 4 families for 6 models") for c in at.caption)
    with Store(path) as opened:
        table = families.family_table(opened).set_index("model")
    assert table.loc["gpt4_0613", "family"] == "gpt" == table.loc["gpt-3.5-turbo", "family"]
    assert table.loc["claude", "family"] == "anthropic"  # the data's family is kept


@pytest.mark.skipif(not ALPACA.exists(), reason="shared AlpacaEval data not present")
def test_alpaca_eval_families_by_prefix_and_by_stem(tmp_path):
    records = pd.read_parquet(ALPACA)
    models = records["model"].drop_duplicates()
    assert models.map(families.default_family).nunique() == 36
    assert models.map(families.stem_family).nunique() == 19


def test_editor_changes_are_the_edited_families_only(store):
    table = families.family_table(store)
    edited = table.copy()
    edited.loc[edited["model"] == "claude", "family"] = " anthropic-2 "
    assert families.editor_changes(table, table) == {}
    assert families.editor_changes(table, edited) == {"claude": "anthropic-2"}


def test_a_command_line_reimport_keeps_the_edited_families(tmp_path, capsys):
    from pkps_core.cli import main

    db = tmp_path / "cli.duckdb"
    source = tmp_path / "r.csv"
    _records().to_csv(source, index=False)
    assert main(["ingest", str(source), "--db", str(db)]) == 0
    with Store(db) as opened:
        families.set_families(opened, {"vicuna-13b": "vicuna", "vicuna-7b": "vicuna"})
    assert main(["ingest", str(source), "--db", str(db)]) == 0  # rows come back "vicuna-13b"
    with Store(db, read_only=True) as opened:
        table = families.family_table(opened).set_index("model")
    assert table.loc["vicuna-13b", "family"] == "vicuna"
    assert table.loc["vicuna-7b", "derived"] == families.EDITED
