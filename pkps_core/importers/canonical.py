"""Canonical importer: CSV / TSV / Parquet in the canonical schema.

Read with :func:`pkps_core.reading.read_records`; the file name's suffix identifies it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pkps_core.importers._common import _Log
from pkps_core.reading import read_records
from pkps_core.records import RecordsError

_CANONICAL_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")


def _load_canonical(path: Path, log: _Log) -> pd.DataFrame:
    if path.is_dir():
        raise RecordsError(f"{path} is a folder; the canonical format is one CSV/Parquet file")
    return read_records(str(path))
