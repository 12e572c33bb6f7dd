"""Model families: how each was derived, the user's edits, and a name-stem suggestion.

A family is stored on every response row (``responses.family``, filled by
:func:`pkps_core.records.default_family` when the data give none). Family holdout depends
on it, and the prefix rule (text before the first ``/`` or ``_``) leaves most model names
without a separator in a family of their own. The Data page shows :func:`family_table`
and saves edits with :func:`set_families`, which rewrites the rows and keeps each edit in
the table ``family_edits`` (so :func:`reapply_families` can restore them after an ingest
brings the rows back with their original family).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

from pkps_core.records import RecordsError, default_family
from pkps_core.store.core import Store

EDITS_TABLE = """
    CREATE TABLE IF NOT EXISTS family_edits (
        model VARCHAR PRIMARY KEY,
        family VARCHAR NOT NULL,
        edited_at TIMESTAMP DEFAULT current_timestamp
    )
"""
PREFIX_RULE = "prefix rule"
FROM_DATA = "from the data"
EDITED = "edited"
_STEM = re.compile(r"[A-Za-z]+")


def stem_family(model: str) -> str:
    """A suggested family: the model name's leading run of letters, lower-cased.

    ``"gpt-3.5-turbo"``, ``"gpt4_0613"`` → ``"gpt"``; ``"vicuna-13b-v1.5"`` → ``"vicuna"``;
    the prefix rule's family when the name has a ``/`` (``"meta/llama-3"`` → ``"meta"``);
    a name without letters is its own family.
    """
    if "/" in model:
        return default_family(model)
    match = _STEM.match(model.strip())
    return match.group(0).lower() if match else model


def _edits(store: Store) -> pd.DataFrame:
    with store._write_lock, store._cursor() as cur:
        if store.read_only:  # a reader creates nothing: no table yet means no edits
            exists = cur.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'family_edits' "
                "AND table_catalog = current_database()"
            ).fetchone()[0]
            if not exists:
                return pd.DataFrame({"model": pd.Series(dtype=str), "family": pd.Series(dtype=str)})
        else:
            cur.execute(EDITS_TABLE)
        return cur.execute("SELECT model, family FROM family_edits").df()


def family_table(store: Store) -> pd.DataFrame:
    """One row per model: ``model, family, derived`` (how the family came about:
    :data:`PREFIX_RULE`, :data:`FROM_DATA` or :data:`EDITED`) and ``suggested``
    (:func:`stem_family`)."""
    with store._cursor() as cur:
        current = cur.execute(
            "SELECT model, min(family) AS family FROM responses GROUP BY model ORDER BY model"
        ).df()
    edited = set(_edits(store)["model"])
    derived = [
        EDITED if model in edited else PREFIX_RULE if family == default_family(model) else FROM_DATA
        for model, family in zip(current["model"], current["family"], strict=True)
    ]
    return current.assign(derived=derived, suggested=current["model"].map(stem_family))


def derivation_note(table: pd.DataFrame) -> str:
    """One sentence: how many families, and how each model's family was set."""
    counts = table["derived"].value_counts()
    wording = {PREFIX_RULE: "by the prefix rule", FROM_DATA: "from the data", EDITED: "edited here"}
    parts = [f"{counts[kind]} {text}" for kind, text in wording.items() if counts.get(kind, 0)]
    return (
        f"{table['family'].nunique()} families for {len(table)} models. Each model's family: "
        f"{', '.join(parts)}. The prefix rule takes the text before the first “/” or “_” of "
        "the model name; a name with neither is a family of its own."
    )


def editor_changes(original: pd.DataFrame, edited: pd.DataFrame) -> dict[str, str]:
    """``{model: family}`` of the rows whose family the user changed in the table."""
    before = original.set_index("model")["family"]
    after = edited.set_index("model")["family"].reindex(before.index)
    changed = after.notna() & (after.astype(str).str.strip() != before.astype(str))
    return {str(m): str(f).strip() for m, f in after[changed].items()}


def suggested_update(table: pd.DataFrame) -> dict[str, str]:
    """The suggestions for the models whose family came from the prefix rule (a family
    given by the data or edited by the user is kept)."""
    rule = table[table["derived"] == PREFIX_RULE]
    return dict(zip(rule["model"], rule["suggested"], strict=True))


def set_families(store: Store, families: Mapping[str, str]) -> int:
    """Give models new families (``{model: family}``); returns how many changed.

    Every response row of a changed model is rewritten and the edit kept in
    ``family_edits``, in one transaction; the store's version is bumped when anything
    changed (so cached fits are refitted). Unknown models and empty family names raise
    :class:`~pkps_core.records.RecordsError` and change nothing.
    """
    wanted = {str(m): str(f).strip() for m, f in families.items()}
    empty = sorted(m for m, f in wanted.items() if not f)
    if empty:
        raise RecordsError(f"a family name cannot be empty (model {empty[0]!r})")
    table = family_table(store).set_index("model")["family"]
    unknown = sorted(set(wanted) - set(table.index))
    if unknown:
        raise RecordsError(f"no model {unknown[0]!r} in the store")
    changed = {m: f for m, f in wanted.items() if table[m] != f}
    if changed:
        _write(store, changed, record=True)
    return len(changed)


def reapply_families(store: Store) -> int:
    """Restore the saved edits on rows that lost them (e.g. re-ingested); returns the
    number of models changed."""
    edits = _edits(store).set_index("model")["family"]
    if not len(edits):
        return 0
    current = family_table(store).set_index("model")["family"]
    stale = {m: f for m, f in edits.items() if m in current.index and current[m] != f}
    with store._cursor() as cur:
        mixed = cur.execute(
            "SELECT model FROM responses GROUP BY model HAVING count(DISTINCT family) > 1"
        ).df()["model"]
    stale |= {m: edits[m] for m in mixed if m in edits.index}
    if stale:
        _write(store, stale, record=False)
    return len(stale)


def _write(store: Store, families: Mapping[str, str], *, record: bool) -> None:
    with store._write_lock, store._cursor() as cur:
        cur.execute(EDITS_TABLE)
        # A temporary table from bound lists, not a registered frame (see arrow._stage).
        cur.execute(
            "CREATE OR REPLACE TEMP TABLE family_update AS "
            "SELECT unnest(?::VARCHAR[]) AS model, unnest(?::VARCHAR[]) AS family",
            [[str(m) for m in families], [str(f) for f in families.values()]],
        )
        cur.execute("BEGIN TRANSACTION")
        try:
            cur.execute(
                "UPDATE responses SET family = u.family FROM family_update u "
                "WHERE responses.model = u.model"
            )
            if record:
                cur.execute(
                    "INSERT OR REPLACE INTO family_edits (model, family) "
                    "SELECT model, family FROM family_update"
                )
            cur.execute("UPDATE meta SET value = value + 1 WHERE key = 'version'")
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
