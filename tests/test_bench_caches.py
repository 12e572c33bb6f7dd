"""The benches' generated caches: the text cache an upload gives (bench/caches.py)."""

import numpy as np

from bench.caches import make_text_records


def test_text_records_have_the_asked_shape_and_texts():
    frame = make_text_records(12, 3, 5, 40, seed=2)
    assert len(frame) == 12 * 3 * 5
    cells = frame.groupby(["model", "task"])["query_id"]
    # each model answers per_task distinct queries of each task
    assert (cells.nunique() == 5).all() and len(cells) == 12 * 3
    assert frame["model"].str.fullmatch(r"fam\d\d/m\d{4}").all()
    assert (frame["model"].str[3:5].astype(int) == frame["model"].str[-4:].astype(int) % 20).all()
    # the query text names its task and id; the response says whether it is right
    expected = frame["task"] + " question " + frame["query_id"]
    assert (frame["query"] == expected).all()
    assert frame["query_id"].astype(int).between(0, 39).all()
    right = frame["response"] == "the right answer"
    assert np.array_equal(right.to_numpy(), frame["score"].to_numpy() == 1.0)
    assert set(frame["response"]) == {"the right answer", "a wrong answer"}


def test_text_records_are_the_seeds():
    first, again = make_text_records(6, 2, 4, 30, seed=5), make_text_records(6, 2, 4, 30, seed=5)
    assert first.equals(again)
    assert not first.equals(make_text_records(6, 2, 4, 30, seed=6))
