"""Fitted state kept in the store: arrays in tables, never pickle.

A fit (e.g. the reference predictor, :mod:`pkps_core.predictor`) is a JSON document and a
set of named numeric arrays. ``fits`` holds one row per fit key (the store version it was
fitted on, a digest of the fitted embedders, the JSON); ``fit_arrays`` one row per array
(dtype, shape and raw bytes). Only plain numeric, boolean and fixed-width text dtypes are
accepted in either direction, so reading a fit never runs code (a shared store must not).
A fit is written in one transaction: a kill -9 leaves the previous fit or the new one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from pkps_core.store.core import Store
from pkps_core.store.opening import StoreError

FITS_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS fits (
        fit_key VARCHAR PRIMARY KEY,
        store_version BIGINT NOT NULL,
        embedders VARCHAR NOT NULL,
        document VARCHAR NOT NULL,
        fitted_at TIMESTAMP DEFAULT current_timestamp
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS fit_arrays (
        fit_key VARCHAR NOT NULL,
        name VARCHAR NOT NULL,
        dtype VARCHAR NOT NULL,
        shape BIGINT[] NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (fit_key, name)
    )
    """,
)
SAFE_KINDS = "biufU"  # bool, int, uint, float, fixed-width unicode: no objects


@dataclass
class StoredFit:
    """A fit read from the store."""

    key: str
    store_version: int
    embedders: str
    document: dict
    arrays: dict[str, np.ndarray]


def fit_key(kind: str, settings: dict) -> str:
    """The key of a fit of ``kind`` with ``settings`` (JSON-able)."""
    text = json.dumps({"kind": kind, "settings": settings}, sort_keys=True)
    return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def embedders_digest(store: Store) -> str:
    """sha256 over the store's fitted embedders: vectors change when they are refitted."""
    with store._cursor() as cur:
        if not _has_table(cur, "embedders"):
            return ""
        rows = cur.execute("SELECT embedder, state FROM embedders ORDER BY embedder").fetchall()
    digest = hashlib.sha256()
    for name, state in rows:  # piece by piece: no concatenated copy of a 25 MB state
        for piece in (name.encode(), b"\x00", state, b"\x00"):
            digest.update(piece)
    return digest.hexdigest()


def _has_table(cur, name: str) -> bool:
    found = cur.execute(
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_name = ? AND table_catalog = current_database()",
        [name],
    ).fetchone()
    return bool(found and found[0])


def _check_dtype(dtype: np.dtype, name: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in SAFE_KINDS or dtype.hasobject:
        raise StoreError(f"fit array {name!r} has dtype {dtype}; only numbers and text are kept")
    return dtype


def save_fit(
    store: Store,
    key: str,
    document: dict,
    arrays: dict[str, np.ndarray],
    store_version: int,
    embedders: str | None = None,
) -> None:
    """Replace the fit ``key`` by ``document`` and ``arrays`` in one transaction.

    ``store_version`` and ``embedders`` (:func:`embedders_digest`; default: now) are what
    the fit was made from: the version read before its records, the digest after them (a
    store's first read fits its embedders)."""
    if store.read_only:
        raise StoreError(f"the store {store.path} was opened read-only; it cannot keep a fit")
    rows = []
    for name, value in arrays.items():
        array = np.ascontiguousarray(value)
        dtype = _check_dtype(array.dtype, name)
        rows.append([key, name, dtype.str, list(array.shape), array.tobytes()])
    text = json.dumps(document, sort_keys=True)
    digest = embedders_digest(store) if embedders is None else embedders
    with store._write_lock, store._cursor() as cur:
        cur.execute("BEGIN TRANSACTION")
        try:
            for statement in FITS_SCHEMA:
                cur.execute(statement)
            cur.execute("DELETE FROM fit_arrays WHERE fit_key = ?", [key])
            cur.execute("DELETE FROM fits WHERE fit_key = ?", [key])
            cur.execute(
                "INSERT INTO fits (fit_key, store_version, embedders, document) "
                "VALUES (?, ?, ?, ?)",
                [key, int(store_version), digest, text],
            )
            if rows:
                cur.executemany("INSERT INTO fit_arrays VALUES (?, ?, ?, ?, ?)", rows)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise


def load_fit(store: Store, key: str) -> StoredFit | None:
    """The fit ``key``, or None when the store has none."""
    with store._cursor() as cur:
        if not _has_table(cur, "fits") or not _has_table(cur, "fit_arrays"):
            return None
        head = cur.execute(
            "SELECT store_version, embedders, document FROM fits WHERE fit_key = ?", [key]
        ).fetchone()
        if head is None:
            return None
        rows = cur.execute(
            "SELECT name, dtype, shape, data FROM fit_arrays WHERE fit_key = ?", [key]
        ).fetchall()
    arrays = {}
    for name, dtype, shape, data in rows:
        array = np.frombuffer(bytes(data), dtype=_check_dtype(dtype, name))
        arrays[name] = array.reshape([int(s) for s in shape]).copy()
    return StoredFit(key, int(head[0]), str(head[1]), json.loads(head[2]), arrays)


def fit_status(store: Store, key: str) -> str:
    """ "none", "current" or "stale" (the responses or the embedders changed since)."""
    found = _head(store, key)
    if found is None:
        return "none"
    version, digest = found
    current = version == store.version and digest == embedders_digest(store)
    return "current" if current else "stale"


def _head(store: Store, key: str) -> tuple[int, str] | None:
    with store._cursor() as cur:
        if not _has_table(cur, "fits"):
            return None
        row = cur.execute(
            "SELECT store_version, embedders FROM fits WHERE fit_key = ?", [key]
        ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))
