"""The canonical record schema: one row per (model, task, query) response.

Every importer maps into these columns and every numeric routine reads them. One entry
point, :func:`validate_records`, turns bad input into a :class:`RecordsError` (a
``ValueError``) whose one-line message names the offending rows or columns and says what
to do. Row numbers in messages count the first data row as 1 (a CSV's header line is
line 1 of the file, so data row *k* is on file line *k* + 1).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("model", "task", "query_id")
TEXT_COLUMNS = ("model", "task", "query_id", "query", "response", "family")
EMBEDDING_COLUMNS = ("query_embedding", "response_embedding")
CANONICAL_COLUMNS = (
    "model",
    "task",
    "query_id",
    "query",
    "response",
    "score",
    "family",
    "reference_score",
    "query_embedding",
    "response_embedding",
)
_MAX_LISTED = 5


class RecordsError(ValueError):
    """Raised when a cache of records breaks the canonical schema.

    The message is one line: what is wrong, where (rows/columns), and what to do.
    """


def _rows(mask: Iterable[bool] | np.ndarray) -> str:
    """Format 1-based data-row numbers of the true entries of ``mask``."""
    positions = np.flatnonzero(np.asarray(mask)) + 1
    shown = ", ".join(str(p) for p in positions[:_MAX_LISTED])
    more = len(positions) - _MAX_LISTED
    suffix = f" and {more} more" if more > 0 else ""
    noun = "row" if len(positions) == 1 else "rows"
    return f"{noun} {shown}{suffix}"


def default_family(model: str) -> str:
    """The family of a model id: the prefix before the first ``/`` or ``_``.

    ``"meta/llama-3-8b"`` → ``"meta"``; ``"openai_gpt-4"`` → ``"openai"``; a name without
    either separator is its own family.
    """
    for i, ch in enumerate(model):
        if ch in "/_" and i > 0:
            return model[:i]
    return model


def _parse_embedding(value: object) -> np.ndarray | None:
    """An embedding cell as a float vector: JSON-array strings, lists and arrays accepted."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        parsed = json.loads(text)
        return np.asarray(parsed, dtype=float)
    return np.asarray(value, dtype=float)


_CHUNK_ROWS = 65_536


def _already_vectors(values: list) -> bool:
    """Fast path: every cell is already a 1-d float array of one length, all finite.

    "Float" is the dtype the cells stack to (NumPy's promotion of their dtypes), as one
    ``np.vstack`` of them would give; finiteness is checked :data:`_CHUNK_ROWS` cells at
    a time, so a million 128-d vectors are never copied into one 1 GB block. A vector that
    several rows share (the store gives each distinct text's vector to all its rows) is
    checked once.
    """
    if not values:
        return False
    values = list({id(v): v for v in values}.values())  # each object once
    if not all(isinstance(v, np.ndarray) for v in values):
        return False
    shapes = {v.shape for v in values}
    if len(shapes) != 1 or len(shape := shapes.pop()) != 1 or shape[0] == 0:
        return False
    if functools.reduce(np.promote_types, {v.dtype for v in values}).kind != "f":
        return False
    return all(
        bool(np.isfinite(np.concatenate(values[start : start + _CHUNK_ROWS])).all())
        for start in range(0, len(values), _CHUNK_ROWS)
    )


def _validate_embeddings(frame: pd.DataFrame, column: str) -> None:
    values = frame[column].tolist()
    if _already_vectors(values):
        return
    parsed: list[np.ndarray | None] = []
    bad: list[bool] = []
    for value in values:
        try:
            vec = _parse_embedding(value)
            ok = vec is None or (vec.ndim == 1 and vec.size > 0 and np.all(np.isfinite(vec)))
        except (ValueError, TypeError):
            vec, ok = None, False
        parsed.append(vec if ok else None)
        bad.append(not ok)
    if any(bad):
        raise RecordsError(
            f"column '{column}' is not a finite numeric vector at {_rows(bad)}; "
            "write each embedding as a JSON array of numbers such as [0.1, -0.2]"
        )
    present = np.array([v is not None for v in parsed])
    if present.any() and not present.all():
        raise RecordsError(
            f"column '{column}' is empty at {_rows(~present)}; give every row an embedding "
            f"or drop the '{column}' column"
        )
    if present.all():
        lengths = np.array([v.size for v in parsed])
        common = int(pd.Series(lengths).mode().iloc[0])
        odd = lengths != common
        if odd.any():
            raise RecordsError(
                f"column '{column}' has embeddings of unequal length: most have {common} "
                f"values but {_rows(odd)} differ; re-embed those rows with the same model"
            )
        frame[column] = parsed


def _text_cells(values: pd.Series, column: str) -> pd.Series:
    """A text column's cells with bytes (a Parquet ``binary`` column) decoded as UTF-8.

    Lists, arrays and mappings (Parquet ``list`` / ``struct`` columns) are refused: their
    Python repr is not the text they hold.
    """
    odd = values.map(lambda v: isinstance(v, bytes | list | tuple | dict | np.ndarray))
    if not odd.any():
        return values
    decoded = []
    for row, value in enumerate(values, start=1):
        if isinstance(value, list | tuple | dict | np.ndarray):
            raise RecordsError(
                f"column '{column}' holds a {type(value).__name__}, not text, at row {row}; "
                "store one string per cell"
            )
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordsError(
                    f"column '{column}' holds bytes that are not UTF-8 text at row {row} "
                    f"(byte {exc.start}); store the texts as UTF-8 strings"
                ) from None
        decoded.append(value)
    return pd.Series(decoded, index=values.index, dtype=object)


def _only_text(values: pd.Series) -> bool:
    """Every cell is a ``str`` or missing (checked without a Python call per cell)."""
    if isinstance(values.dtype, pd.StringDtype):
        return True
    return values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) in (
        "string",
        "empty",
    )


def _text_column(values: pd.Series, column: str) -> pd.Series:
    """A text column as :func:`validate_records` returns it: identifiers as ``str``
    (refused when blank), other texts as ``str`` objects or ``None``.

    A column of strings and missing cells only (pandas' ``str`` dtype, as a CSV gives
    it) is returned as the per-cell conversion would return it, without visiting cells.
    """
    only_text = _only_text(values)
    if not only_text:
        values = _text_cells(values, column)
    # An empty response is a real answer (it embeds to the zero vector); only the
    # identifiers must be non-blank. Missing (None/NaN) is missing for every column.
    empty = values.isna()
    required = column in REQUIRED_COLUMNS
    if required:
        empty = empty | (values.astype(str).str.strip() == "")
        if empty.any():
            raise RecordsError(
                f"column '{column}' is empty at {_rows(empty.to_numpy())}; every row needs a "
                f"{column}"
            )
    if not only_text:
        as_text = values.map(lambda v: v if isinstance(v, str) else str(v))
    elif required and not isinstance(values.dtype, pd.StringDtype):
        # what ``map`` returns for an object column of strings: pandas' inferred dtype
        as_text = pd.Series(values.to_numpy(dtype=object), index=values.index)
    else:
        as_text = values
    if not required:
        # object dtype: under pandas 3 a str column turns None back into NaN, which
        # the store's Arrow conversion refuses.
        as_text = as_text.astype(object).where(~empty.to_numpy(), None)
    return as_text


def _validate_scores(frame: pd.DataFrame, column: str, *, required: bool) -> None:
    raw = frame[column]
    numeric = pd.to_numeric(raw, errors="coerce").astype(float)
    non_numeric = (numeric.isna() & raw.notna()).to_numpy(dtype=bool, copy=True)
    if non_numeric.any():  # of the cells that did not parse, blank text is no score
        blank = (raw[non_numeric].astype(str).str.strip() == "").to_numpy(dtype=bool)
        non_numeric[np.flatnonzero(non_numeric)[blank]] = False
    if non_numeric.any():
        raise RecordsError(
            f"column '{column}' is not numeric at {_rows(non_numeric)}; "
            "scores must be numbers (e.g. 0/1 or a value in [0, 1])"
        )
    infinite = np.isinf(numeric.to_numpy())
    if infinite.any():
        raise RecordsError(
            f"column '{column}' is infinite at {_rows(infinite)}; replace with a finite number"
        )
    if required and numeric.isna().any():
        raise RecordsError(
            f"column '{column}' is missing (empty/NaN) at {_rows(numeric.isna().to_numpy())}; "
            "every response used as a score needs one — fill it or drop those rows"
        )
    frame[column] = numeric


SCORE_COLUMNS = ("score", "reference_score")


def check_score_range(records: pd.DataFrame, *, percent: bool = False) -> pd.DataFrame:
    """Refuse scores outside [0, 1], or with ``percent`` rescale percentages to it.

    The schema's scores are 0/1 or a value in [0, 1]; a cache scored in percent would be
    predicted and ranked on another scale than the store's references without a word, so
    it is refused at every boundary where records enter (an ingest, an upload, ``report
    --responses``) with one line naming the rows and how to rescale.

    Parameters
    ----------
    records : DataFrame
        Validated records (:func:`validate_records`).
    percent : bool, default=False
        The scores are percentages: ``score`` and ``reference_score`` are divided by 100
        (they must then lie in [0, 100]).

    Returns
    -------
    DataFrame
        ``records`` (a rescaled copy with ``percent``).

    Raises
    ------
    RecordsError
        A score column has finite values outside the allowed range.
    """
    frame = records.copy() if percent else records
    high = 100.0 if percent else 1.0
    for column in SCORE_COLUMNS:
        if column not in frame.columns:
            continue
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        outside = np.isfinite(values) & ((values < 0) | (values > high))
        if outside.any():
            worst = values[outside][np.argmax(np.abs(values[outside]))]
            if percent:
                raise RecordsError(
                    f"column '{column}' is outside [0, 100] at {_rows(outside)} (e.g. "
                    f"{worst:g}) although the scores were said to be percentages; give "
                    "scores in [0, 1], or in [0, 100] with the percent option"
                )
            hint = (
                "if they are percentages, rescale them to [0, 1] (divide by 100: "
                "--percent-scores on the command line, 'Scores are percentages' on the page)"
                if np.nanmax(values) <= 100 and np.nanmin(values) >= 0
                else "rescale them to [0, 1] (e.g. divide by the scale's maximum)"
            )
            raise RecordsError(
                f"column '{column}' is outside [0, 1] at {_rows(outside)} (e.g. {worst:g}); "
                f"scores must lie in [0, 1] — {hint}"
            )
        if percent:
            frame[column] = values / 100.0
    return frame


def _refuse_near_misses(columns) -> None:
    """Refuse a column named like an absent canonical one but for case, spaces or ``-``
    (``Score``): it would otherwise be dropped as unknown, its data lost without a word."""
    fold = {c: str(c).casefold().replace(" ", "_").replace("-", "_") for c in columns}
    wanted = set(CANONICAL_COLUMNS) - set(columns)
    near = [f"{c!r} (did you mean {k!r}?)" for c, k in fold.items() if k in wanted]
    if near:
        raise RecordsError(f"column(s) {', '.join(near)}: names are matched exactly; rename them")


def validate_records(
    records: pd.DataFrame,
    *,
    require_scores: bool = False,
) -> pd.DataFrame:
    """Check a cache against the canonical schema and return a normalised copy.

    Parameters
    ----------
    records : DataFrame
        One row per (model, task, query) response, with the :data:`CANONICAL_COLUMNS`
        (``docs/reference/input-schema.md``).
    require_scores : bool, default=False
        If True, every row needs a finite ``score``. Otherwise NaN scores are allowed and
        such rows only contribute their response to the perspective space.

    Returns
    -------
    DataFrame
        A copy with identifier columns as ``str`` (bytes, as a Parquet ``binary`` column
        gives them, decoded as UTF-8), scores as ``float``, ``family`` filled
        (default: :func:`default_family`), embedding cells as float arrays, and a fresh
        ``RangeIndex``. Missing texts are ``None``; a row without query text takes the
        text other rows give its (task, query_id). Unknown columns are kept.

    Raises
    ------
    RecordsError
        Missing required columns; text bytes that are not UTF-8, or lists / mappings
        in a text column; empty identifiers;
        duplicate (model, task, query_id); a query_id with two different query texts;
        non-numeric, infinite or (when needed) missing scores; a reference_score that
        varies within a (model, task) cell; malformed embeddings or embeddings of unequal
        length; no response representation.
    """
    if not isinstance(records, pd.DataFrame):
        raise RecordsError("records must be a table (pandas DataFrame)")
    if len(records) == 0:
        raise RecordsError("the file has no data rows; add at least one response row")
    frame = records.copy()
    frame.columns = [str(c).strip() for c in frame.columns]
    _refuse_near_misses(frame.columns)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise RecordsError(
            f"missing required column(s) {', '.join(repr(c) for c in missing)}; "
            f"the canonical columns are {', '.join(CANONICAL_COLUMNS)}"
        )
    frame = frame.reset_index(drop=True)

    for column in TEXT_COLUMNS:
        if column in frame.columns:
            frame[column] = _text_column(frame[column], column)

    if "query" in frame.columns and frame["query"].isna().any():
        # A query_id keeps one text: a row without it takes the text its other rows give.
        known = frame.dropna(subset=["query"]).groupby(["task", "query_id"])["query"].first()
        keys = pd.MultiIndex.from_frame(frame[["task", "query_id"]])
        filled = pd.Series(known.reindex(keys).to_numpy(), index=frame.index, dtype=object)
        frame["query"] = frame["query"].where(frame["query"].notna(), filled)
        frame["query"] = frame["query"].astype(object).where(frame["query"].notna(), None)

    keys = ["model", "task", "query_id"]
    duplicated = frame.duplicated(keys, keep=False)
    if duplicated.any():
        first = frame.loc[duplicated, keys].iloc[0]
        raise RecordsError(
            f"duplicate (model, task, query_id) at {_rows(duplicated.to_numpy())} "
            f"(e.g. {first['model']!r}, {first['task']!r}, {first['query_id']!r}); "
            "keep one response per model and query"
        )

    if "query" in frame.columns:
        texts = frame.dropna(subset=["query"])
        n_texts = texts.groupby(["task", "query_id"])["query"].nunique()
        conflicting = n_texts[n_texts > 1]
        if len(conflicting):
            task, query_id = conflicting.index[0]
            mask = (frame["task"] == task) & (frame["query_id"] == query_id)
            raise RecordsError(
                f"query_id {query_id!r} of task {task!r} has {int(conflicting.iloc[0])} "
                f"different query texts at {_rows(mask.to_numpy())}; a query_id must keep "
                "one text — give the variants distinct query_ids"
            )

    if "score" in frame.columns:
        _validate_scores(frame, "score", required=require_scores)
    elif require_scores:
        raise RecordsError("missing column 'score'; per-response scores are needed here")
    if "reference_score" in frame.columns:
        _validate_scores(frame, "reference_score", required=False)
        spread = frame.groupby(["model", "task"])["reference_score"].nunique(dropna=False)
        varying = spread[spread > 1]
        if len(varying):
            model, task = varying.index[0]
            mask = (frame["model"] == model) & (frame["task"] == task)
            raise RecordsError(
                f"reference_score varies within cell ({model!r}, {task!r}) at "
                f"{_rows(mask.to_numpy())}; it is the full-task score and must be constant "
                "within a (model, task) cell"
            )

    for column in EMBEDDING_COLUMNS:
        if column in frame.columns:
            _validate_embeddings(frame, column)

    has_response = (
        "response_embedding" in frame.columns
        or ("response" in frame.columns and frame["response"].notna().any())
        or ("score" in frame.columns and frame["score"].notna().any())
    )
    if not has_response:
        raise RecordsError(
            "no response representation: give a 'response' text column, a "
            "'response_embedding' column, or per-response 'score' values"
        )
    if "response" in frame.columns and "response_embedding" not in frame.columns:
        no_text = frame["response"].isna()
        if no_text.any() and no_text.mean() < 1.0:
            raise RecordsError(
                f"column 'response' is empty at {_rows(no_text.to_numpy())}; give every row "
                "its response text (or drop the column for a score-only cache)"
            )

    if "family" not in frame.columns:
        frame["family"] = _families(frame["model"])
    else:
        missing_family = frame["family"].isna()
        frame.loc[missing_family, "family"] = frame.loc[missing_family, "model"].map(default_family)
    return frame


def _families(models: pd.Series) -> pd.Series:
    """``models.map(default_family)``, calling it once per distinct model of a ``str``
    column (the identifiers' dtype after :func:`_text_column`)."""
    if not isinstance(models.dtype, pd.StringDtype):
        return models.map(default_family)
    codes, distinct = pd.factorize(models)
    families = np.array([default_family(m) for m in distinct], dtype=object)[codes]
    return pd.Series(pd.array(families, dtype=models.dtype), index=models.index)


def response_representation(records: pd.DataFrame) -> str:
    """Which response representation a validated cache carries.

    Returns ``"embedding"`` (precomputed vectors), ``"text"`` (response text to embed) or
    ``"score"`` (a score-only cache: the per-response score is a 1-d representation).
    """
    if "response_embedding" in records.columns:
        return "embedding"
    if "response" in records.columns and records["response"].notna().all():
        return "text"
    return "score"


def cell_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task) cell: family, number of responses, sample score and reference.

    The sample score is the mean of the cell's observed (non-NaN) scores. The reference
    is the cell's ``reference_score`` when that column exists (NaN where it is empty),
    otherwise the sample score.
    """
    scores = records["score"] if "score" in records.columns else pd.Series(np.nan, records.index)
    frame = pd.DataFrame(
        {
            "model": records["model"],
            "task": records["task"],
            "family": records["family"],
            "score": scores.astype(float),
        }
    )
    grouped = frame.groupby(["model", "task"], sort=True)
    cells = grouped.agg(
        family=("family", "first"),
        n_responses=("score", "size"),
        n_scored=("score", "count"),
        sample_score=("score", "mean"),
    ).reset_index()
    if "reference_score" in records.columns:
        reference = records.groupby(["model", "task"], sort=True)["reference_score"].first()
        cells["reference_score"] = reference.to_numpy(dtype=float)
        cells["reference"] = cells["reference_score"]
    else:
        cells["reference_score"] = np.nan
        cells["reference"] = cells["sample_score"]
    return cells
