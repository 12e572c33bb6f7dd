"""Validation of the canonical record schema: every bad input names rows and a fix."""

import numpy as np
import pandas as pd
import pytest

from pkps_core.reading import read_records
from pkps_core.records import (
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
