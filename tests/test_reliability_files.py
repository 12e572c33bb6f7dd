"""Hostile files a new user's folders hold (issue 32, classes 4, 5, 7, 8, 9 and 10).

Deeply nested JSON, other files beside a HELM run or AlpacaEval ``results/``, pipes and
devices, decompression bombs, a forced format that is not the file's, two files with the
same keys in one command, a non-UTF-8 byte deep in a file, a stray quote: each is one
``error:`` line (exit 2, the store unchanged) or a named note, never a traceback or a hang.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process
from importer_corpus import FORMATS, write_alpaca, write_eee, write_helm

from pkps_core import cli
from pkps_core.importers import load
from pkps_core.records import RecordsError
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
DEEP = "[" * 100_000 + "]" * 100_000


def run(*args, env: dict | None = None, timeout: float = 120, process: bool = False):
    """The command's answer, in this process (:mod:`cli_in_process`), or from ``python -m
    pkps_core`` started as a user starts it (``process``: pipes and devices, whose reads
    could hang; decompression bombs and deep nesting, which could exhaust a process; and
    one case of each other check, so nothing a fresh interpreter prints is missed)."""
    if not process:
        return run_in_process(*args, env=env)
    return subprocess.run(
        [sys.executable, "-m", "pkps_core", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def one_line_error(done, *needles) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def write_format(folder: Path, kind: str) -> Path:
    parts, writer, _ = FORMATS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    return writer(folder, parts())


def canonical(path: Path, model: str = "org/model", scores=(1.0, 0.0)) -> Path:
    frame = pd.DataFrame(
        {
            "model": model,
            "task": "csv-task",
            "query_id": ["c1", "c2"],
            "query": ["Q c1", "Q c2"],
            "response": ["R1", "R2"],
            "score": list(scores),
        }
    )
    frame.to_csv(path, index=False)
    return path


# ------------------------------------------------------------------ class 4: deep JSON


@pytest.mark.parametrize("kind", ["eee", "lm_eval"])
def test_a_deeply_nested_line_is_skipped_with_a_note(tmp_path, kind):
    path = write_format(tmp_path, kind)
    lines = path.read_text().splitlines()
    lines.insert(1, '{"doc_id": 7, "sample_id": "deep", "payload": ' + DEEP + "}")
    path.write_text("\n".join(lines) + "\n")

    result = load(path)
    assert len(result.records) == 2
    assert any("nested too deeply" in line and "line 2" in line for line in result.skipped)


def _deepen(path: Path) -> None:
    """Put the deep value inside the JSON document at ``path`` (valid JSON still)."""
    document = json.loads(path.read_text())
    if isinstance(document, dict):
        document["deep"] = "DEEP-HERE"
    else:
        document.append("DEEP-HERE")
    path.write_text(json.dumps(document).replace('"DEEP-HERE"', DEEP))


@pytest.mark.parametrize(
    ("kind", "document"),
    [
        ("inspect", "log.json"),
        ("helm", "run/scenario_state.json"),
        ("helm", "run/per_instance_stats.json"),
        ("alpaca_eval", "results/model/model_outputs.json"),
        ("alpaca_eval", "results/model/weighted_alpaca_eval_gpt4_turbo/annotations.json"),
        ("eee", "f3a1c0de-0000-4000-8000-000000000000.json"),
        ("lm_eval", "results_2025-01-01T00-00-00.000001.json"),
    ],
)
def test_a_deeply_nested_document_is_one_line(tmp_path, kind, document):
    target = write_format(tmp_path / "in", kind)
    _deepen(tmp_path / "in" / document)
    done = run("ingest", target, "--db", tmp_path / "store.duckdb", process=True)
    one_line_error(done, Path(document).name, "nested too deeply")
    assert not (tmp_path / "store.duckdb").exists()


# ------------------------------------------------------------------ class 5: other files


def test_other_files_beside_a_helm_run_are_imported_or_named(tmp_path):
    run_folder = write_helm(tmp_path, FORMATS["helm"][0]())
    (run_folder / "stats.json").write_text("[]")  # HELM's own output: part of the run
    canonical(run_folder / "extra.csv")
    write_eee(run_folder, FORMATS["eee"][0]())
    (run_folder / "notes.txt").write_text("my notes\n")

    result = load(run_folder)
    assert result.formats == {"helm": 2, "canonical": 2, "eee": 2}
    assert len(result.records) == 6
    assert [line for line in result.skipped if "notes.txt" in line]
    assert not [line for line in result.skipped if "stats.json" in line]


def test_other_files_in_an_alpaca_eval_results_folder_are_imported_or_named(tmp_path):
    results = write_alpaca(tmp_path, FORMATS["alpaca_eval"][0]())
    canonical(results / "leaderboard-extra.csv")
    (results / "model" / "README.md").write_text("how these were made\n")

    result = load(results)
    assert result.formats == {"alpaca_eval": 2, "canonical": 2}
    assert [line for line in result.skipped if "README.md" in line]

    done = run("ingest", results, "--db", tmp_path / "store.duckdb")
    assert done.returncode == 0, done.stderr
    assert "4 added" in done.stdout and "README.md" in done.stdout


# ------------------------------------------------------------------ class 7: pipes, bombs


def test_a_named_pipe_in_a_folder_is_skipped_with_a_note(tmp_path):
    canonical(tmp_path / "good.csv")
    os.mkfifo(tmp_path / "pipe.jsonl")
    os.symlink("/dev/zero", tmp_path / "zero.csv")
    done = run("ingest", tmp_path, "--db", tmp_path / "store.duckdb", timeout=60, process=True)
    assert done.returncode == 0, done.stderr
    assert "2 added" in done.stdout
    notes = [line for line in done.stdout.splitlines() if "not a regular file" in line]
    assert len(notes) == 2 and "pipe.jsonl" in notes[0] + notes[1] and "zero.csv" in "".join(notes)


@pytest.mark.parametrize("name", ["pipe.csv", "zero.jsonl"])
def test_a_named_pipe_or_device_given_alone_is_one_line(tmp_path, name):
    path = tmp_path / name
    if name.startswith("pipe"):
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    done = run("ingest", path, "--db", tmp_path / "store.duckdb", timeout=60, process=True)
    one_line_error(done, name, "not a regular file")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_file_that_expands_past_the_read_bound_is_one_line(tmp_path, kind):
    if kind == "csv":
        path = tmp_path / "bomb.csv.gz"
        header = b"model,task,query_id,response,score\n"
        row = b"m,t,q,r,1\n"
    else:
        path = tmp_path / "samples_bench_2025-01-01T00-00-00.000001.jsonl.gz"
        header = b""
        row = b'{"doc_id": 1, "filtered_resps": ["x"], "exact_match": 1}\n'
    with gzip.open(path, "wb") as handle:
        handle.write(header)
        for _ in range(200):
            handle.write(row * 10_000)
    assert path.stat().st_size < 400_000  # 20 MB or more once decompressed
    done = run(
        "ingest",
        path,
        "--db",
        tmp_path / "store.duckdb",
        env={"PKPS_MAX_READ_BYTES": "1000000"},
        process=True,
    )
    one_line_error(done, path.name, "PKPS_MAX_READ_BYTES")


def test_memory_exhaustion_in_an_importer_is_one_line(tmp_path, monkeypatch, capsys):
    source = canonical(tmp_path / "a.csv")

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("pkps_core.reading._read_delimited", exhausted)
    with pytest.raises(RecordsError, match="not enough memory to read .*a.csv"):
        load(source)
    monkeypatch.setattr("pkps_core.importers.load", exhausted)
    assert cli.main(["ingest", str(source), "--db", str(tmp_path / "s.duckdb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: out of memory"), err


# ------------------------------------------------------------------ class 8: forced format


FILE_FORMATS = ["eee", "lm_eval", "inspect", "alpaca_eval", "helm"]


@pytest.mark.parametrize(
    "forced", ["canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval"]
)
@pytest.mark.parametrize("actual", FILE_FORMATS)
def test_a_forced_format_that_is_not_the_files_is_one_line_or_imports(tmp_path, forced, actual):
    path = write_format(tmp_path / "in", actual)
    try:
        load(path, format=forced)
    except RecordsError as exc:
        assert "\n" not in str(exc)
    if forced != actual:
        done = run("ingest", path, "--db", tmp_path / "store.duckdb", "--format", forced)
        assert "Traceback" not in done.stderr, done.stderr


def test_alpaca_eval_forced_on_an_inspect_log_names_the_file(tmp_path):
    path = write_format(tmp_path, "inspect")
    done = run(
        "ingest", path, "--db", tmp_path / "store.duckdb", "--format", "alpaca_eval", process=True
    )
    one_line_error(done, str(path), "model_outputs.json")


# ------------------------------------------------------------------ class 9: two files, one key


@pytest.mark.slow
def test_two_files_with_the_same_keys_in_one_command_are_refused_like_one_folder(tmp_path):
    first = canonical(tmp_path / "a.csv", scores=(1.0, 0.0))
    second = canonical(tmp_path / "b.csv", scores=(0.0, 1.0))
    db = tmp_path / "store.duckdb"
    line = one_line_error(run("ingest", first, second, "--db", db), "a.csv", "b.csv")
    assert "appears in" in line
    assert not db.exists()

    folder = tmp_path / "both"
    folder.mkdir()
    canonical(folder / "a.csv", scores=(1.0, 0.0))
    canonical(folder / "b.csv", scores=(0.0, 1.0))
    one_line_error(run("ingest", folder, "--db", db), "appears in", "a.csv", "b.csv")
    assert not db.exists()


@pytest.mark.slow
def test_two_files_in_one_command_into_a_store_leave_it_unchanged(tmp_path):
    db = tmp_path / "store.duckdb"
    canonical(tmp_path / "base.csv", model="org/base")
    assert run("ingest", tmp_path / "base.csv", "--db", db).returncode == 0
    with Store(db, read_only=True) as store:
        before = store.content_hash(), store.version
    first = canonical(tmp_path / "a.csv", scores=(1.0, 0.0))
    second = canonical(tmp_path / "b.csv", scores=(0.0, 1.0))
    one_line_error(run("ingest", first, second, "--db", db), "a.csv", "b.csv")
    with Store(db, read_only=True) as store:
        assert (store.content_hash(), store.version) == before


# ------------------------------------------------------------------ class 10: where and what


def test_a_non_utf8_byte_deep_in_a_csv_is_named_where_it_is(tmp_path):
    path = tmp_path / "latin1.csv"
    rows = ["model,task,query_id,response,score"]
    rows += [f"m,t,q{i},answer {i},1" for i in range(5000)]
    rows[4001] = "m,t,q4000,caf\xe9,1"
    path.write_bytes("\n".join(rows).encode("latin-1") + b"\n")
    offset = path.read_bytes().index(b"\xe9")
    done = run("ingest", path, "--db", tmp_path / "store.duckdb")
    one_line_error(done, "latin1.csv", "line 4002", f"byte {offset}", "UTF-8")


STRAY = {
    # the quote closes three rows later: two rows vanish into one cell
    "swallowed": [
        'a,t,q1,what is 1,"one,1',
        "a,t,q2,what is 2,two,0",
        'b,t,q1,what is 1,one",1',
        "b,t,q2,what is 2,two,1",
    ],
    # the merged row then lacks its response
    "empty response": [
        'a,t,q1,"what is 1,one,1',
        "a,t,q2,what is 2,two,0",
        'b,t,q1,what",,',
        "b,t,q2,what is 2,two,1",
    ],
}


@pytest.mark.parametrize("case", list(STRAY))
def test_a_stray_quote_is_named_as_such(tmp_path, case):
    path = tmp_path / "stray.csv"
    path.write_text("model,task,query_id,query,response,score\n" + "\n".join(STRAY[case]) + "\n")
    done = run("ingest", path, "--db", tmp_path / "store.duckdb")
    line = one_line_error(done, "stray.csv", "stray double quote")
    assert "empty" not in line
    assert not (tmp_path / "store.duckdb").exists()


def test_multi_line_texts_that_are_not_rows_still_import(tmp_path):
    path = tmp_path / "multi.csv"
    frame = pd.DataFrame(
        {
            "model": ["a", "b"],
            "task": ["t", "t"],
            "query_id": ["q1", "q1"],
            "response": ["line one\nline two, with a comma", "x,y,z\n1,2,3"],
            "score": [1.0, 0.0],
        }
    )
    frame.to_csv(path, index=False)
    assert len(load(path).records) == 2
