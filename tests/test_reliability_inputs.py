"""Hostile but plausible input files (issue 16): texts verbatim, one clear line per error.

Each file is generated in ``tmp_path``; the library and the command line both read it.
"""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core.importers import load
from pkps_core.reading import _rows_with_line_ends, read_records
from pkps_core.records import RecordsError, validate_records
from pkps_core.store import Store, text_hash
from pkps_core.store.ingest import _incoming_table

ROOT = Path(__file__).resolve().parents[1]
NA_TOKENS = ["None", "NA", "N/A", "null", "NaN", "nan", "#N/A", "<NA>"]


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


def one_line_error(done, *needles):
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def stored(db: Path) -> pd.DataFrame:
    with Store(str(db)) as store:
        return store.records()


def na_token_frame() -> pd.DataFrame:
    """Two models answering the same queries; responses and one query_id are NA tokens."""
    rows = []
    for m, model in enumerate(["org/a", "org/b", "lab/c"]):
        for q, query_id in enumerate(["q1", "NA", "null", "q4"]):
            rows.append(
                {
                    "model": model,
                    "task": "t",
                    "query_id": query_id,
                    "query": f"question number {q} about colours",
                    "response": NA_TOKENS[(m * 4 + q) % len(NA_TOKENS)],
                    "score": float((m + q) % 2),
                }
            )
    frame = pd.DataFrame(rows)
    frame.loc[5, "response"] = ""  # an empty answer, scored
    return frame


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".tsv"])
def test_na_token_texts_round_trip_verbatim(tmp_path, suffix):
    frame = na_token_frame()
    path = tmp_path / f"na{suffix}"
    frame.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    key = ["model", "task", "query_id"]
    want = frame.sort_values(key).reset_index(drop=True)

    read = validate_records(read_records(str(path))).sort_values(key).reset_index(drop=True)
    assert read["response"].tolist() == want["response"].tolist()
    assert read["query_id"].tolist() == want["query_id"].tolist()

    db = tmp_path / "na.duckdb"
    done = run("ingest", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    back = stored(db)
    assert back[key + ["response"]].values.tolist() == want[key + ["response"]].values.tolist()
    # the store equals the one ingested from Parquet
    parquet = tmp_path / "na.parquet"
    frame.to_parquet(parquet, index=False)
    db2 = tmp_path / "na2.duckdb"
    assert run("ingest", str(parquet), "--db", str(db2)).returncode == 0
    from_parquet = stored(db2)
    pd.testing.assert_frame_equal(
        back[key + ["query", "response", "score"]],
        from_parquet[key + ["query", "response", "score"]],
    )

    out = tmp_path / "p.csv"
    done = run("predict", "--input", str(path), "--out", str(out), "--no-interval")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(out)) == 3 * 3  # 3 models x 1 task x 3 default methods


def test_na_tokens_in_scores_still_mean_missing(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("model,task,query_id,response,score\na,t,q1,NA,NA\na,t,q2,x,1\n")
    records = validate_records(read_records(str(path)))
    assert records["response"].tolist() == ["NA", "x"]
    assert records["score"].isna().tolist() == [True, False]


def test_empty_response_without_score_is_still_missing(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("model,task,query_id,response,score\na,t,q1,,\na,t,q2,hello there,1\n")
    with pytest.raises(RecordsError, match=r"column 'response' is empty at row 1"):
        validate_records(read_records(str(path)))
    # a score-only cache written with an empty response column stays score-only
    path.write_text("model,task,query_id,response,score\na,t,q1,,0\na,t,q2,,1\n")
    assert validate_records(read_records(str(path)))["response"].isna().all()


def test_a_stray_quote_after_real_multi_line_texts_names_its_own_row(tmp_path):
    """Only cells holding a line end are looked at; the row named is still the cell's."""
    path = tmp_path / "stray.csv"
    lines = ["model,task,query_id,query,response,score"]
    lines += [f"m,t,q{i},what is {i},answer {i},1" for i in range(1, 7)]
    lines[2] = 'm,t,q2,what is 2,"two lines,\nthe second with a comma",1'  # a real text
    lines[4] = 'm,t,q4,what is 4,"four,1'  # the stray quote, closed on the next line
    lines[5] = 'm,t,q5,what is 5,five",0'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordsError) as refused:
        read_records(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path}: row 4's 'response' runs over several lines")
    assert "'m,t,q5,what is 5,five'" in message


def test_line_ends_are_found_in_str_and_object_columns_alike():
    cells = ["a", "b\nc", None, "d", "\n", "e\r\nf", "", "g"]
    expected = [2, 5, 6]
    assert _rows_with_line_ends(pd.Series(cells, dtype="str")) == expected
    assert _rows_with_line_ends(pd.Series(cells, dtype="string")) == expected
    assert _rows_with_line_ends(pd.Series(cells, dtype=object)) == expected
    assert _rows_with_line_ends(pd.Series([*cells, 3, b"x\ny"], dtype=object)) == expected


def test_incoming_rows_carry_each_texts_own_hash():
    """Hashing each distinct text once still gives every row its own text's hash."""
    frame = validate_records(
        pd.DataFrame(
            {
                "model": ["a", "a", "b", "b", "c"],
                "task": "t",
                "query_id": ["q1", "q2", "q1", "q2", "q3"],
                "query": ["one", None, "one", "two", "héllo ✓"],
                "response": ["x", "", "x", "y", "x"],
                "score": 1.0,
            }
        )
    )
    table = _incoming_table(frame, "test.csv").to_pydict()
    for name in ("query", "response"):
        texts = frame[name].tolist()
        assert table[name] == texts
        assert table[f"{name}_hash"] == [None if t is None else text_hash(t) for t in texts]
    assert table["query"][1] == "two"  # the blank query took its query_id's text
    for name in ("model", "task", "query_id", "family"):
        assert table[name] == frame[name].tolist()


def blank_query_csv(tmp_path: Path, *, text_elsewhere: bool) -> Path:
    rows = []
    for model in ["org/a", "org/b", "lab/c"]:
        for q in range(3):
            rows.append(
                {
                    "model": model,
                    "task": "t",
                    "query_id": f"q{q}",
                    "query": f"what colour is thing number {q}",
                    "response": f"{model} says thing {q} is colour {q * 7 % 5}",
                    "score": float(q % 2),
                }
            )
    frame = pd.DataFrame(rows)
    frame.loc[4, "query"] = ""  # org/b, q1
    if not text_elsewhere:
        frame.loc[frame["query_id"] == "q1", "query"] = ""
    path = tmp_path / "blank.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_blank_query_cell_takes_the_text_of_its_query(tmp_path):
    path = blank_query_csv(tmp_path, text_elsewhere=True)
    records = validate_records(read_records(str(path)))
    assert records.loc[4, "query"] == "what colour is thing number 1"
    db = tmp_path / "b.duckdb"
    done = run("ingest", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert stored(db)["query"].notna().all()
    out = tmp_path / "p.csv"
    done = run("predict", "--input", str(path), "--out", str(out), "--no-interval")
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_query_without_any_text_is_stored_and_predict_names_it(tmp_path):
    path = blank_query_csv(tmp_path, text_elsewhere=False)
    db = tmp_path / "b.duckdb"
    done = run("ingest", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    back = stored(db)
    assert back["query"].isna().sum() == 3
    assert back["query"].dropna().str.startswith("what colour").all()
    out = tmp_path / "p.csv"
    for source in (["--input", str(path)], ["--db", str(db)]):
        done = run("predict", *source, "--out", str(out), "--no-interval")
        one_line_error(done, "query_id 'q1' of task 't'", "no query text", "'query'")
    done = run("predict", "--input", str(path), "--out", str(out), "--no-interval")
    assert "rows 2, 5, 8" in done.stderr
    # the delta kernel needs no query text (intervals still build the RBF space: issue 16)
    done = run(
        "predict",
        "--input",
        str(path),
        "--out",
        str(out),
        "--methods",
        "sample,dkps",
        "--no-interval",
    )
    assert done.returncode == 0, done.stderr


def test_eee_sample_without_input_is_stored(tmp_path):
    def sample(model, sample_id, with_input):
        item = {
            "schema_version": "0.2.0",
            "model_id": model,
            "evaluation_name": "bench",
            "sample_id": sample_id,
            "output": {"raw": [f"{model} answers {sample_id}"]},
            "evaluation": {"score": 1.0},
        }
        if with_input:
            item["input"] = {"raw": f"question {sample_id}"}
        return json.dumps(item)

    path = tmp_path / "run_samples.jsonl"
    lines = [sample("org/a", 1, True), sample("org/a", 2, False), sample("org/b", 1, False)]
    path.write_text("\n".join(lines) + "\n")
    records = load(path).records
    db = tmp_path / "e.duckdb"
    done = run("ingest", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    back = stored(db).set_index(["model", "query_id"])["query"]
    assert back[("org/b", "1")] == "question 1"  # the text its query has elsewhere
    assert back[("org/a", "2")] is None
    assert len(records) == 3


@pytest.mark.slow
def test_truncated_gzip_is_one_line_and_stores_nothing(tmp_path):
    frame = na_token_frame()
    good = tmp_path / "good.csv"
    frame.to_csv(good, index=False)
    big = pd.concat([frame.assign(task=f"t{i}") for i in range(200)], ignore_index=True)
    data = gzip.compress(big.to_csv(index=False).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])

    with pytest.raises(RecordsError, match="truncated or corrupt"):
        read_records(str(path))
    db = tmp_path / "t.duckdb"
    assert run("ingest", str(good), "--db", str(db)).returncode == 0
    before = stored(db)
    done = run("ingest", str(path), "--db", str(db))
    one_line_error(done, str(path), "truncated or corrupt")
    pd.testing.assert_frame_equal(stored(db), before)
    done = run("predict", "--input", str(path), "--out", str(tmp_path / "p.csv"))
    one_line_error(done, str(path), "truncated or corrupt")
