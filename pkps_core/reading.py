"""Reading a cache file: canonical CSV / TSV / Parquet, and the bounded byte reads every
importer uses.

:func:`read_records` reads a canonical file with its texts verbatim (pandas' NA tokens
stay texts) and refuses in one line what cannot be read: a pipe or device (reading one
blocks or never ends), more than :func:`max_read_bytes` after decompression, text that is
not UTF-8 (named by line and byte), rows merged by a stray double quote, a damaged gzip.
Validation against the schema is :func:`pkps_core.records.validate_records`'s job.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib

import numpy as np
import pandas as pd

from pkps_core.records import TEXT_COLUMNS, RecordsError

DEFAULT_MAX_READ_BYTES = 4 * 1024**3
"""Most bytes an import reads from one file, after decompression (a gzip that expands
without end, a link to ``/dev/zero``); ``PKPS_MAX_READ_BYTES`` sets another bound."""


def max_read_bytes() -> int:
    """``PKPS_MAX_READ_BYTES`` if set to a positive whole number, else the default."""
    text = os.environ.get("PKPS_MAX_READ_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_READ_BYTES
    if not text.isdigit() or int(text) <= 0:
        raise RecordsError(f"PKPS_MAX_READ_BYTES must be a positive number of bytes, got {text!r}")
    return int(text)


def check_regular_file(path: str | os.PathLike[str]) -> None:
    """Refuse a pipe, device, socket or broken link: reading one can block or never end."""
    if not os.path.isfile(path):
        raise RecordsError(
            f"{path} is not a regular file (a pipe, device, socket or broken link); "
            "give the file itself"
        )


def too_large(path: str | os.PathLike[str], limit: int) -> RecordsError:
    return RecordsError(
        f"{path} holds more than {limit:,} bytes (after decompression), more than an "
        "import reads; split it, or set PKPS_MAX_READ_BYTES to a larger bound"
    )


def out_of_memory(path: str | os.PathLike[str]) -> RecordsError:
    return RecordsError(
        f"not enough memory to read {path}; split it into smaller files, or import it on a "
        "machine with more memory"
    )


GZIP = b"\x1f\x8b"


class _Bounded(io.RawIOBase):
    """A binary stream that raises :func:`too_large` past ``limit`` bytes."""

    def __init__(self, stream, limit: int, path: str) -> None:
        self.stream, self.limit, self.path, self.count = stream, limit, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.stream.readinto(buffer)
        self.count += n
        if self.count > self.limit:
            raise too_large(self.path, self.limit)
        return n

    def close(self) -> None:
        self.stream.close()
        super().close()


def open_bounded(path: str | os.PathLike[str]) -> io.BufferedReader:
    """``path`` for reading bytes, gunzipped when the bytes are gzip, raising
    :class:`RecordsError` past :func:`max_read_bytes` bytes."""
    check_regular_file(path)
    handle = open(path, "rb")
    stream = gzip.GzipFile(fileobj=handle, mode="rb") if handle.peek(2)[:2] == GZIP else handle
    return io.BufferedReader(_Bounded(stream, max_read_bytes(), str(path)))


def not_utf8(path: str | os.PathLike[str], raw: bytes, exc: UnicodeDecodeError) -> RecordsError:
    """The error for text that is not UTF-8, naming the first bad byte's line and offset
    in ``raw`` (the file's bytes, decompressed)."""
    line = raw.count(b"\n", 0, exc.start) + 1
    return RecordsError(
        f"{path} is not UTF-8 text (line {line}, byte {exc.start}: 0x{raw[exc.start]:02x}); "
        "save it as UTF-8 and retry"
    )


def _utf8_error(path: str) -> RecordsError:
    """:func:`not_utf8` for a file pandas failed to decode (pandas reads in chunks, so its
    own error's offset is within a chunk, not the file)."""
    with open_bounded(path) as handle:
        raw = handle.read()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not_utf8(path, raw, exc)
    return RecordsError(f"{path} is not UTF-8 text; save it as UTF-8 and retry")


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def read_records(path: str) -> pd.DataFrame:
    """Read a canonical CSV or Parquet file (not yet validated).

    Raises :class:`RecordsError` with a one-line message when the file cannot be read.
    """
    if not os.path.exists(path):
        raise RecordsError(f"file not found: {path}")
    check_regular_file(path)
    with open(path, "rb") as handle:
        if handle.read(len(LFS_POINTER)) == LFS_POINTER:
            raise RecordsError(
                f"{path} is a Git LFS pointer, not the file it stands for; fetch the file "
                "(`git lfs pull` in its repository) and retry"
            )
    lower = path.lower()
    try:
        if lower.endswith((".parquet", ".pq")):
            if os.path.getsize(path) > max_read_bytes():
                raise too_large(path, max_read_bytes())
            return pd.read_parquet(path)
        if lower.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")):
            sep = "\t" if ".tsv" in lower else ","
            return _read_delimited(path, sep)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise RecordsError(
            f"{path} is a truncated or corrupt gzip file ({exc}); re-create or re-download it"
        ) from None
    except UnicodeDecodeError:
        raise _utf8_error(path) from None
    except MemoryError:
        raise out_of_memory(path) from None
    except RecordsError:
        raise
    except pd.errors.EmptyDataError:
        raise RecordsError(f"{path} is empty; it needs a header row and data rows") from None
    except pd.errors.ParserError as exc:
        detail = str(exc).strip().splitlines()[-1]
        raise RecordsError(f"{path} is not well-formed CSV: {detail}") from None
    except (OSError, ValueError) as exc:
        raise RecordsError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    raise RecordsError(f"{path}: unknown file type; use .csv, .tsv or .parquet")


# pandas' default NA tokens: in a score column they still mean "no score".
_MISSING_NUMBER = {"na", "n/a", "nan", "-nan", "null", "none", "#n/a", "<na>", "-1.#ind", "1.#qnan"}


def _read_delimited(path: str, sep: str) -> pd.DataFrame:
    """A CSV/TSV with text verbatim: only an empty field is missing.

    Texts such as ``NA``, ``None`` or ``null`` stay texts (pandas' default NA tokens are
    off). In ``score`` / ``reference_score`` those tokens still mean "no score". An empty
    ``response`` in a row with a score is the empty answer ``""`` (how pandas writes it),
    unless the whole column is empty (a score-only cache).
    """
    with open_bounded(path) as handle:
        frame = pd.read_csv(
            handle,
            sep=sep,
            encoding="utf-8",
            dtype={c: str for c in TEXT_COLUMNS},
            keep_default_na=False,
            na_values=[""],
        )
    _check_swallowed_rows(frame, path, sep)
    for column in ("score", "reference_score"):
        if column in frame.columns and not pd.api.types.is_numeric_dtype(frame[column]):
            values = frame[column].astype(object)
            token = values.map(
                lambda v: isinstance(v, str) and v.strip().lower() in _MISSING_NUMBER
            )
            frame[column] = values.where(~token.to_numpy(), None)
    if "response" in frame.columns and "response_embedding" not in frame.columns:
        empty = frame["response"].isna()
        if "score" in frame.columns and not empty.all():
            scored = pd.to_numeric(frame["score"], errors="coerce").notna()
            frame["response"] = frame["response"].where(~(empty & scored), "")
    return frame


def _check_swallowed_rows(frame: pd.DataFrame, path: str, sep: str) -> None:
    """Refuse rows merged by a stray double quote.

    A ``"`` that opens a field by mistake makes the parser read on, across line ends,
    to the next ``"``: the lines in between become one cell and their rows vanish. Such
    a cell holds whole lines that start like rows of the file (a known model, then a
    known task, in their columns); a real multi-line text almost never does.
    """
    if not {"model", "task"} <= set(frame.columns) or len(frame) == 0:
        return
    columns = list(frame.columns)
    at_model, at_task = columns.index("model"), columns.index("task")
    models = set(frame["model"].dropna().astype(str).unique())
    tasks = set(frame["task"].dropna().astype(str).unique())
    for position, column in enumerate(columns):
        values = frame.iloc[:, position]
        if pd.api.types.is_numeric_dtype(values):
            continue
        for row in _rows_with_line_ends(values):
            value = values.iat[row - 1]
            for line in value.split("\n")[1:]:
                fields = line.rstrip("\r").split(sep)
                if (
                    len(fields) > max(at_model, at_task)
                    and fields[at_model] in models
                    and fields[at_task] in tasks
                ):
                    shown = line if len(line) <= 60 else line[:59] + "…"
                    raise RecordsError(
                        f"{path}: row {row}'s '{column}' runs over several lines that are "
                        f'rows of their own (e.g. {shown!r}): a stray double quote (") '
                        "opened a quoted field there; remove it, or write a quote inside a "
                        'quoted field as two ("")'
                    )


def _rows_with_line_ends(values: pd.Series) -> list[int]:
    """1-based rows of ``values`` whose cell is a string holding a line end; a ``str``
    column (as pandas reads text) is searched without a Python call per cell."""
    if isinstance(values.dtype, pd.StringDtype):
        found = values.str.contains("\n", regex=False).to_numpy(dtype=bool, na_value=False)
    else:
        found = np.fromiter(
            (isinstance(v, str) and "\n" in v for v in values), dtype=bool, count=len(values)
        )
    return (np.flatnonzero(found) + 1).tolist()
