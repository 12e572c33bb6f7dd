"""Validation of the canonical record schema: every bad input names rows and a fix."""

import numpy as np
import pandas as pd
import pytest

from pkps_core import records
from pkps_core.reading import read_records
from pkps_core.records import (
    EMBEDDING_COLUMNS,
    TEXT_COLUMNS,
    RecordsError,
    cell_table,
    default_family,
    response_representation,
    validate_records,
)


def good():
    return pd.DataFrame(
        {
            "model": ["org/a", "org/a", "other_b", "other_b"],
            "task": ["t1", "t2", "t1", "t2"],
            "query_id": ["q1", "q9", "q1", "q9"],
            "query": ["What?", "Why?", "What?", "Why?"],
            "response": ["x", "y", "z", "w"],
            "score": [1, 0, 0.5, 1],
        }
    )


def test_valid_records_are_normalised():
    out = validate_records(good())
    assert list(out["family"]) == ["org", "org", "other", "other"]
    assert out["score"].dtype == float
    assert response_representation(out) == "text"


@pytest.mark.parametrize(
    "model,family",
    [
        ("meta/llama", "meta"),
        ("openai_gpt-4", "openai"),
        ("vicuna-13b", "vicuna-13b"),
        ("/x", "/x"),
    ],
)
def test_default_family(model, family):
    assert default_family(model) == family


def test_missing_column_is_named():
    with pytest.raises(RecordsError, match="missing required column.*'model'"):
        validate_records(good().drop(columns="model"))


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("Score", "score"),
        ("Model", "model"),
        ("query ID", "query_id"),
        ("reference-score", "reference_score"),
    ],
)
def test_a_column_named_like_a_canonical_one_is_refused_not_dropped(given, canonical):
    frame = good()
    if canonical == "reference_score":
        frame[canonical] = frame.groupby(["model", "task"])["score"].transform("mean")
    frame = frame.rename(columns={canonical: given})
    with pytest.raises(RecordsError, match=rf"'{given}' \(did you mean '{canonical}'\?\)"):
        validate_records(frame)
    # beside the canonical column it is only an unknown column, kept as the schema says
    if canonical in good().columns:
        assert given in validate_records(good().assign(**{given: "x"})).columns


def test_duplicate_rows_are_listed():
    frame = pd.concat([good(), good().iloc[[2]]], ignore_index=True)
    with pytest.raises(RecordsError, match=r"duplicate \(model, task, query_id\) at rows 3, 5"):
        validate_records(frame)


def test_query_id_with_two_texts():
    frame = good()
    frame.loc[2, "query"] = "Something else?"
    with pytest.raises(
        RecordsError, match="query_id 'q1' of task 't1' has 2 different query texts"
    ):
        validate_records(frame)


def test_non_numeric_score_names_row():
    frame = good().astype({"score": object})
    frame.loc[1, "score"] = "high"
    with pytest.raises(RecordsError, match="'score' is not numeric at row 2"):
        validate_records(frame)


def test_infinite_score():
    frame = good()
    frame.loc[3, "score"] = np.inf
    with pytest.raises(RecordsError, match="infinite at row 4"):
        validate_records(frame)


def test_nan_score_only_rejected_when_required():
    frame = good()
    frame.loc[0, "score"] = np.nan
    assert np.isnan(validate_records(frame)["score"].iloc[0])
    with pytest.raises(RecordsError, match="missing .* at row 1"):
        validate_records(frame, require_scores=True)


def test_embeddings_of_unequal_length():
    frame = good()
    frame["response_embedding"] = ["[1, 2]", "[1, 2]", "[1, 2, 3]", "[3, 4]"]
    with pytest.raises(RecordsError, match="unequal length: most have 2 values but row 3"):
        validate_records(frame)


def test_malformed_embedding():
    frame = good()
    frame["query_embedding"] = ["[1, 2]", "oops", "[1, 2]", "[3, 4]"]
    with pytest.raises(
        RecordsError, match="'query_embedding' is not a finite numeric vector at row 2"
    ):
        validate_records(frame)


def test_reference_score_must_be_constant_within_cell():
    frame = pd.DataFrame(
        {
            "model": ["a", "a"],
            "task": ["t", "t"],
            "query_id": ["1", "2"],
            "score": [1.0, 0.0],
            "reference_score": [0.5, 0.6],
        }
    )
    with pytest.raises(RecordsError, match="reference_score varies within cell"):
        validate_records(frame)


def test_score_only_cache_is_valid():
    frame = pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "task": ["t"] * 3,
            "query_id": ["1", "2", "1"],
            "score": [1, 0, 1],
        }
    )
    out = validate_records(frame)
    assert response_representation(out) == "score"


def test_nothing_to_represent_responses():
    frame = pd.DataFrame({"model": ["a"], "task": ["t"], "query_id": ["1"]})
    with pytest.raises(RecordsError, match="no response representation"):
        validate_records(frame)


def test_empty_frame():
    with pytest.raises(RecordsError, match="no data rows"):
        validate_records(good().iloc[:0])


def test_cell_table_sample_and_reference():
    frame = validate_records(good())
    cells = cell_table(frame)
    a_t1 = cells[(cells.model == "org/a") & (cells.task == "t1")].iloc[0]
    assert a_t1.sample_score == 1.0 and a_t1.reference == 1.0 and a_t1.n_responses == 1
    frame["reference_score"] = [0.9, 0.1, 0.4, 0.7]
    cells = cell_table(frame)
    assert cells.set_index(["model", "task"]).loc[("org/a", "t1"), "reference"] == 0.9


def test_read_records_errors(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(RecordsError, match="is empty"):
        read_records(str(empty))
    latin = tmp_path / "latin.csv"
    latin.write_bytes("model,task,query_id,score\ncaf\xe9,t,1,1\n".encode("latin-1"))
    with pytest.raises(RecordsError, match="not UTF-8"):
        read_records(str(latin))
    with pytest.raises(RecordsError, match="file not found"):
        read_records(str(tmp_path / "nope.csv"))
    with pytest.raises(RecordsError, match="unknown file type"):
        read_records(str(latin.rename(tmp_path / "x.xlsx")))


def test_empty_response_text_is_a_real_answer():
    frame = good()
    frame.loc[1, "response"] = ""
    out = validate_records(frame)
    assert out.loc[1, "response"] == ""
    frame.loc[2, "model"] = "  "
    with pytest.raises(RecordsError, match="'model' is empty at row 3"):
        validate_records(frame)


# ------------------------------------------------------------------ fast paths, same results
# validate_records skips its per-cell passes where the column's dtype already answers them
# (a str column holds no bytes or lists); these tests hold it to the per-cell path's output.


def _vstack_check(values):
    """The embedding check as it was: one np.vstack of every cell."""
    if not values or not all(isinstance(v, np.ndarray) and v.ndim == 1 for v in values):
        return False
    length = values[0].size
    if length == 0 or any(v.size != length for v in values):
        return False
    stacked = np.vstack(values)
    return stacked.dtype.kind == "f" and bool(np.isfinite(stacked).all())


def per_cell(frame, monkeypatch):
    """``validate_records`` through the per-cell paths only."""
    with monkeypatch.context() as patch:
        patch.setattr(records, "_only_text", lambda values: False)
        patch.setattr(records, "_already_vectors", _vstack_check)
        patch.setattr(records, "_families", lambda models: models.map(default_family))
        return validate_records(frame)


def assert_same_records(fast, slow):
    embeddings = [c for c in EMBEDDING_COLUMNS if c in slow.columns]
    pd.testing.assert_frame_equal(fast.drop(columns=embeddings), slow.drop(columns=embeddings))
    for column in embeddings:
        assert fast[column].dtype == slow[column].dtype
        for a, b in zip(fast[column], slow[column], strict=True):
            assert type(a) is type(b) and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def _with(**columns):
    frame = good()
    for name, values in columns.items():
        frame[name] = pd.Series(values, dtype=object) if isinstance(values, list) else values
    return frame


def _vectors(dtype=float):
    return [np.arange(3, dtype=dtype) + i for i in range(4)]


FRAMES = {
    "str columns": good,
    "object columns": lambda: good().astype(object),
    "NA string dtype": lambda: good().astype({c: "string" for c in TEXT_COLUMNS[:5]}),
    "python string storage": lambda: good().astype(
        {c: pd.StringDtype("python") for c in TEXT_COLUMNS[:5]}
    ),
    "missing query texts": lambda: _with(query=["What?", None, np.nan, "Why?"]),
    "str query with NaN": lambda: good().assign(
        query=pd.Series(["What?", np.nan, "What?", "Why?"], dtype="str")
    ),
    "no query text at all": lambda: _with(query=[None, None, None, None]),
    "family partly given": lambda: _with(family=["org", None, np.nan, "mine"]),
    "family as str": lambda: good().assign(family=pd.Series(["a", np.nan, "b", "c"])),
    "bytes cells": lambda: _with(model=[b"org/a", "org/a", b"other_b", "other_b"]),
    "bytes response": lambda: _with(response=[b"x", "y", b"z", "w"]),
    "int query ids": lambda: good().assign(query_id=[1, 9, 1, 9]),
    "float query ids": lambda: good().assign(query_id=[1.0, 9.5, 1.0, 9.5]),
    "mixed query ids": lambda: _with(query_id=[1, "q9", 1, "q9"]),
    "numpy str cells": lambda: _with(task=[np.str_("t1"), "t2", "t1", np.str_("t2")]),
    "categorical model": lambda: good().astype({"model": "category"}),
    "score-only": lambda: _with(response=[None, None, None, None]),
    "object scores": lambda: _with(score=["1", " ", None, 0.5]),
    "unknown column": lambda: good().assign(note=["a", None, "c", "d"]),
    "embeddings as arrays": lambda: _with(response_embedding=_vectors()),
    "float32 embeddings": lambda: _with(response_embedding=_vectors(np.float32)),
    "int and float embeddings": lambda: _with(
        query_embedding=[np.arange(3), *_vectors()[1:]], response_embedding=_vectors()
    ),
    "int embeddings": lambda: _with(response_embedding=_vectors(int)),
    "embeddings as lists": lambda: _with(response_embedding=[[0.1, 0.2]] * 4),
    "embeddings as JSON": lambda: _with(response_embedding=["[0.1, 0.2]", "[1, 2]"] * 2),
}


@pytest.mark.parametrize("name", list(FRAMES))
def test_fast_paths_return_what_the_per_cell_path_returns(name, monkeypatch):
    frame = FRAMES[name]()
    fast = validate_records(frame.copy())
    assert_same_records(fast, per_cell(frame.copy(), monkeypatch))
    # validated again, as an upload's files' union and the store's ingest and read are
    assert_same_records(validate_records(fast), per_cell(fast, monkeypatch))


def test_str_columns_are_not_visited_cell_by_cell(monkeypatch):
    def refuse(values, column):
        raise AssertionError(f"per-cell pass over {column}")

    monkeypatch.setattr(records, "_text_cells", refuse)
    validate_records(good())
    validate_records(good().astype(object))
    with pytest.raises(AssertionError, match="per-cell pass over model"):
        validate_records(_with(model=[b"org/a", "org/a", b"other_b", "other_b"]))


BAD_FRAMES = {
    "blank model": lambda: good().assign(model=["org/a", "  ", "other_b", "other_b"]),
    "missing task in str": lambda: good().assign(
        task=pd.Series(["t1", np.nan, "t1", "t2"], dtype="str")
    ),
    "missing query_id in object": lambda: _with(query_id=["q1", None, "q1", "q9"]),
    "missing query_id in NA string": lambda: good().assign(
        query_id=pd.Series(["q1", pd.NA, "q1", "q9"], dtype="string")
    ),
    "duplicates": lambda: good().assign(query_id=["q1", "q1", "q1", "q9"], task="t1"),
    "two query texts": lambda: good().assign(query=["What?", "Why?", "How?", "Why?"]),
    "bytes not UTF-8": lambda: _with(model=["org/a", b"\xff", "other_b", "other_b"]),
    "list in a text column": lambda: _with(response=["x", ["y"], "z", "w"]),
    "response partly missing": lambda: good().assign(
        response=pd.Series(["x", np.nan, "z", "w"], dtype="str")
    ),
    "non-numeric score": lambda: _with(score=["1", "high", " ", "0"]),
    "embedding with NaN": lambda: _with(
        response_embedding=[*_vectors()[:3], np.array([0.0, np.nan, 1.0])]
    ),
    "embeddings of two lengths": lambda: _with(response_embedding=[*_vectors()[:3], np.zeros(2)]),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_fast_paths_refuse_with_the_per_cell_paths_message(name, monkeypatch):
    with pytest.raises(RecordsError) as slow:
        per_cell(BAD_FRAMES[name](), monkeypatch)
    with pytest.raises(RecordsError) as fast:
        validate_records(BAD_FRAMES[name]())
    assert str(fast.value) == str(slow.value)


def test_blank_score_text_is_missing_and_other_text_is_not_numeric():
    frame = pd.concat([good()] * 2, ignore_index=True).assign(query_id=[f"q{i}" for i in range(8)])
    frame["score"] = pd.Series([" ", "x", None, "1", np.nan, "", "y", 0.5], dtype=object)
    with pytest.raises(RecordsError, match=r"'score' is not numeric at rows 2, 7;"):
        validate_records(frame)


VECTOR_CELLS = {
    "float64": _vectors(),
    "float32 and float64": [*_vectors(np.float32)[:2], *_vectors()[2:]],
    "int then float": [*_vectors(int)[:2], *_vectors()[2:]],
    "ints": _vectors(int),
    "bools": [np.array([True, False])] * 4,
    "complex": [np.ones(2, dtype=complex)] * 4,
    "strings": [np.array(["0.1", "0.2"])] * 4,
    "objects": [np.array([0.1, 0.2], dtype=object)] * 4,
    "infinite in the last chunk": [*_vectors()[:3], np.array([0.0, np.inf, 1.0])],
    "NaN in the first chunk": [np.array([np.nan, 0.0, 1.0]), *_vectors()[1:]],
    "two lengths": [*_vectors()[:3], np.zeros(2)],
    "empty vectors": [np.zeros(0)] * 4,
    "a 2-d cell": [*_vectors()[:3], np.zeros((1, 3))],
    "a list cell": [*_vectors()[:3], [0.0, 1.0, 2.0]],
    "one cell": _vectors()[:1],
    "no cells": [],
    # the store gives every row of a text that text's one vector object: checked once
    "one shared vector": [_vectors()[0]] * 4,
    "a shared vector with NaN": [np.array([0.0, np.nan, 1.0])] * 4,
    "shared vectors and one infinite": [
        *[_vectors()[0]] * 2,
        np.array([np.inf, 0.0, 1.0]),
        _vectors()[0],
    ],
    "a shared float32 among float64": [np.zeros(3, dtype=np.float32)] * 2 + _vectors()[:2],
}


@pytest.mark.parametrize("chunk", [1, 3, 65_536])
@pytest.mark.parametrize("name", list(VECTOR_CELLS))
def test_chunked_embedding_check_answers_as_one_vstack(name, chunk, monkeypatch):
    monkeypatch.setattr(records, "_CHUNK_ROWS", chunk)
    cells = VECTOR_CELLS[name]
    assert records._already_vectors(cells) == _vstack_check(cells)
