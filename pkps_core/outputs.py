"""Output files: checked before the work, written whole or not at all, CSV cells inert.

Every file a command writes (``predict``, ``synth``, ``evaluate``, ``report``, ``export``)
and every table the app hands out as a download goes through here:

- :func:`check_writable` refuses, in one line, an output path that cannot be written (a
  directory, a path under a regular file, a read-only folder) *before* the expensive work.
- :func:`atomic_path` / :func:`atomic_directory` write into a temporary file (folder) in the
  same folder and ``os.replace`` it onto the target: a write stopped partway (a full disk,
  a file-size limit, ``kill -9``) leaves the previous output or none, never a truncated one.
  A process killed outright may leave its hidden ``.NAME.*.partial`` beside the target.
- :func:`csv_safe` neutralises cells that a spreadsheet would run as a formula (OWASP's
  rule: a cell starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return gets a
  leading single quote). Only CSV exports are changed: stored names and Parquet stay
  verbatim.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from pkps_core.records import RecordsError

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a CSV cell as a formula (OWASP)."""

TABLE_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
PARTIAL_SUFFIX = ".partial"

_NO_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_NOT_ALLOWED = (errno.EROFS, errno.EACCES, errno.EPERM)


class OutputError(RecordsError):
    """An output cannot be written; the message names the path and what to do."""


def table_format(path: str | os.PathLike[str]) -> str:
    """``"csv"`` or ``"parquet"`` from the file name; :class:`OutputError` otherwise."""
    kind = TABLE_FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise OutputError(f"output {path}: unknown file type; use .csv or .parquet")
    return kind


def os_error_message(
    exc: OSError, path: str | os.PathLike[str] | None = None, *, action: str = "write"
) -> str:
    """One line for an OS error on ``path``: what happened and what to do."""
    where = path if path is not None else exc.filename
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno in _NO_SPACE:
        hint = "free some disk space (or raise the file-size limit) and retry"
    elif exc.errno in _NOT_ALLOWED:
        hint = "choose a folder you can write to"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        hint = "a file stands where a folder is needed; choose another path"
    elif exc.errno == errno.EISDIR:
        hint = "give a file name, not a folder"
    else:
        hint = "check the path and retry"
    return f"cannot {action} {where}: {reason}; {hint}"


def _real(path: str | os.PathLike[str]) -> Path:
    """``path`` with symlinks resolved: the link's target is replaced, not the link."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def _probe_folder(folder: Path, shown: str | os.PathLike[str]) -> None:
    """Create and remove a file in ``folder``: permissions alone do not tell (root, a
    read-only mount)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise OutputError(os_error_message(exc, shown)) from None


def check_writable(path: str | os.PathLike[str], *, directory: bool = False) -> Path:
    """Refuse ``path`` as an output in one line unless it can be written; returns it.

    Checks, without writing the output: the target is not a folder (for a file) or a
    file (for a ``directory`` output) or another kind of file (a pipe, a device); no
    existing part of its folder is a regular file; the nearest existing folder accepts a
    new file. Missing folders are created later, by the write.

    Raises
    ------
    OutputError
    """
    target = _real(path)
    if target.exists():
        if directory and not target.is_dir():
            raise OutputError(f"{path} is a file, not a folder; give a folder for the output")
        if not directory and target.is_dir():
            raise OutputError(f"{path} is a directory, not a file; give a file path")
        if not directory and not target.is_file():
            raise OutputError(f"{path} is not a regular file (a pipe or device); give a file")
    folder = _nearest_existing(target.parent)
    if not folder.is_dir():
        raise OutputError(
            f"cannot write {path}: {folder} is a file, not a folder; choose another path"
        )
    _probe_folder(folder, path)
    return target


def _new_file_mode(target: Path) -> int:
    if target.exists():
        return target.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; on leaving the block it is synced
    and ``os.replace``\\ d onto ``path``. On any error the temporary file is removed, the
    previous ``path`` stays as it was, and an OS error becomes an :class:`OutputError`.
    """
    target = _real(path)
    partial = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX, dir=target.parent
        )
        os.close(handle)
        partial = Path(name)
        yield partial
        with open(partial, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(partial, _new_file_mode(target))
        os.replace(partial, target)
        partial = None
    except OSError as exc:
        raise OutputError(os_error_message(exc, path)) from None
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder beside ``path`` to fill; on leaving the block it takes the
    place of ``path`` (whose old content is removed only then). On any error the
    temporary folder is removed and ``path`` stays as it was."""
    target = _real(path)
    partial = old = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX, dir=target.parent)
        )
        yield partial
        if target.exists():
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            os.replace(target, old / "previous")
        os.replace(partial, target)
        partial = None
    except OSError as exc:
        if old is not None and not target.exists():
            os.replace(old / "previous", target)
        raise OutputError(os_error_message(exc, path)) from None
    finally:
        for leftover in (partial, old):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell and column name that starts with ``=``, ``+``,
    ``-``, ``@``, tab or CR prefixed by ``'`` (OWASP's CSV-injection rule), so a
    spreadsheet shows it as text instead of running it. Numbers are not touched."""

    def inert(value: object) -> object:
        if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
            return "'" + value
        return value

    out = frame
    for position in range(frame.shape[1]):
        values = frame.iloc[:, position]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_datetime64_any_dtype(values):
            continue
        risky = [isinstance(v, str) and v.startswith(FORMULA_PREFIXES) for v in values]
        if any(risky):
            cells = [inert(v) for v in values]
            out = out.copy() if out is frame else out
            out.isetitem(position, pd.Series(cells, index=frame.index, dtype=object))
    names = [inert(c) for c in frame.columns]
    if names != list(frame.columns):
        out = out.copy() if out is frame else out
        out.columns = names
    return out


def _line_end(frame: pd.DataFrame) -> str:
    """``"\\n"``, or ``"\\r\\n"`` (RFC 4180) when a text cell or name holds a carriage
    return: Python's csv writer quotes a field holding a line feed but not one holding a
    lone CR, which readers then take for a line break; with CRLF line ends it is quoted."""
    columns = (frame.iloc[:, i] for i in range(frame.shape[1]))
    text = (c for c in columns if not pd.api.types.is_numeric_dtype(c))
    cells = any(isinstance(v, str) and "\r" in v for column in text for v in column)
    return "\r\n" if cells or any("\r" in str(c) for c in frame.columns) else "\n"


def write_table(
    frame: pd.DataFrame, path: str | os.PathLike[str], file_format: str | None = None
) -> None:
    """``frame`` as CSV (:func:`csv_safe`) or Parquet (verbatim), no index, written
    atomically; the format is ``file_format`` or, by default, the name's suffix."""
    kind = file_format or table_format(path)
    with atomic_path(path) as partial:
        if kind == "csv":
            safe = csv_safe(frame)
            safe.to_csv(partial, index=False, lineterminator=_line_end(safe))
        else:
            frame.to_parquet(partial, index=False)


def table_bytes(frame: pd.DataFrame, file_format: str) -> bytes:
    """``frame`` as the bytes :func:`write_table` writes for ``"csv"`` or ``"parquet"``."""
    if file_format == "csv":
        safe = csv_safe(frame)
        return safe.to_csv(index=False, lineterminator=_line_end(safe)).encode("utf-8")
    if file_format == "parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    raise ValueError(f"file_format must be 'csv' or 'parquet', got {file_format!r}")


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` to ``path``, atomically."""
    with atomic_path(path) as partial:
        partial.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` to ``path`` as UTF-8, atomically."""
    write_bytes(path, text.encode("utf-8"))
