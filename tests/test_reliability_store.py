"""Stores under hostile conditions (issue 16): wrong kinds of file, failed ingests that must
leave nothing, one transaction per command, processes sharing one store, score-only caches,
names with terminal escapes. Every input is generated in ``tmp_path``.

The command line runs in-process (:func:`pkps_core.cli.main`) except where two processes
must hold one file at once; the holder is always a separate Python process.
"""

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from pkps_core.cli import main
from pkps_core.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[1]


def cache(models, tasks=("t1", "t2"), n_queries=4, *, query=True, score_offset=0.0):
    rows = []
    for m, model in enumerate(models):
        for task in tasks:
            for q in range(n_queries):
                row = {
                    "model": model,
                    "task": task,
                    "query_id": f"q{q}",
                    "score": float((m + q) % 2) * (1 - score_offset) + score_offset / 2,
                    "response": f"{model} says {q * (m + 1)} about {task}",
                }
                if query:
                    row["query"] = f"question {q} of {task}"
                rows.append(row)
    return pd.DataFrame(rows)


def write(frame, path):
    frame.to_csv(path, index=False)
    return str(path)


def cli(capsys, *args):
    """(exit code, stdout, stderr lines) of one in-process command."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()]


def one_line(code, err, *needles):
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])


def state(db):
    """Everything a failed command must leave as it was."""
    with Store(db, read_only=True) as store:
        return store.content_hash(), store.version, store.summary(), len(store.ingest_log())


# ------------------------------------------------------------------ wrong kinds of file


@pytest.mark.parametrize("command", ["ingest", "info", "predict"])
def test_db_that_is_a_directory_is_refused_in_one_line(tmp_path, capsys, command):
    good = write(cache(["a/x", "b/y"]), tmp_path / "good.csv")
    folder = tmp_path / "folder"
    folder.mkdir()
    args = {
        "ingest": ["ingest", good, "--db", folder],
        "info": ["info", "--db", folder],
        "predict": ["predict", "--db", folder, "--out", tmp_path / "p.csv"],
    }[command]
    code, _, err = cli(capsys, *args)
    one_line(code, err, str(folder), "is a directory")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", ["ingest", "info"])
def test_db_that_is_not_duckdb_is_refused_and_left_as_it_was(tmp_path, capsys, command):
    good = write(cache(["a/x", "b/y"]), tmp_path / "good.csv")
    notes = tmp_path / "notes.duckdb"
    notes.write_bytes(b"my notes, not a database\n" * 100)
    args = ["ingest", good, "--db", notes] if command == "ingest" else ["info", "--db", notes]
    code, _, err = cli(capsys, *args)
    one_line(code, err, str(notes), "not a DuckDB store file")
    assert notes.read_bytes() == b"my notes, not a database\n" * 100


def test_duckdb_file_that_is_not_a_store_is_refused_and_gets_no_tables(tmp_path, capsys):
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER)")
    good = write(cache(["a/x", "b/y"]), tmp_path / "good.csv")
    code, _, err = cli(capsys, "ingest", good, "--db", other)
    one_line(code, err, "not a Perspective Explorer store", "invoices")
    with duckdb.connect(str(other), read_only=True) as connection:
        tables = connection.execute("SELECT table_name FROM information_schema.tables").fetchall()
    assert tables == [("invoices",)]


def test_readers_on_a_missing_store_create_nothing(tmp_path, capsys):
    missing = tmp_path / "nosuchdir" / "x.duckdb"
    for args in (["info", "--db", missing], ["predict", "--db", missing, "--out", "p.csv"]):
        code, _, err = cli(capsys, *args)
        one_line(code, err, "no store at", str(missing))
    assert not (tmp_path / "nosuchdir").exists()
    with pytest.raises(StoreError, match="no store at"):
        Store(missing, create=False)
    assert not (tmp_path / "nosuchdir").exists()


# ------------------------------------------------------------------ one transaction, nothing left


def conflicting_pair(tmp_path):
    """Two valid files whose query texts disagree for the same (task, query_id)."""
    first = cache(["a/x", "b/y"])
    second = cache(["c/z"])
    second["query"] = "another text for " + second["query"]
    return write(first, tmp_path / "first.csv"), write(second, tmp_path / "second.csv")


def test_failed_ingest_into_a_new_path_leaves_no_file_and_no_folder(tmp_path, capsys):
    first, second = conflicting_pair(tmp_path)
    target = tmp_path / "new" / "deeper" / "store.duckdb"
    code, _, err = cli(capsys, "ingest", first, second, "--db", target)
    one_line(code, err, "different query texts")
    assert not (tmp_path / "new").exists()


def test_ingest_of_several_files_is_one_transaction(tmp_path, capsys):
    db = tmp_path / "store.duckdb"
    code, _, _ = cli(capsys, "ingest", write(cache(["old/m"]), tmp_path / "old.csv"), "--db", db)
    assert code == 0
    before = state(db)
    first, second = conflicting_pair(tmp_path)
    code, _, err = cli(capsys, "ingest", first, second, "--db", db)
    one_line(code, err, "different query texts")
    assert state(db) == before  # the first file was not committed either
    unreadable = tmp_path / "broken.csv.gz"
    unreadable.write_bytes(b"\x1f\x8b\x08\x00truncated")
    code, _, err = cli(capsys, "ingest", first, unreadable, "--db", db)
    one_line(code, err, "broken.csv.gz")
    assert state(db) == before
    code, out, _ = cli(
        capsys, "ingest", first, write(cache(["d/w"]), tmp_path / "d.csv"), "--db", db
    )
    assert code == 0 and "first.csv: 16 added" in out and "d.csv: 8 added" in out
    assert state(db)[2]["models"] == 4


def test_ingest_names_unknown_columns_and_refuses_scores_outside_the_unit_interval(
    tmp_path, capsys
):
    frame = cache(["a/x", "b/y"])
    frame["judge_comment"] = "fine"
    code, out, _ = cli(capsys, "ingest", write(frame, tmp_path / "ok.csv"), "--db", tmp_path / "s")
    assert code == 0
    assert "columns not stored: judge_comment" in out
    frame.loc[[0, 5], "score"] = [1.5, -0.25]
    before = state(tmp_path / "s")
    code, _, err = cli(capsys, "ingest", write(frame, tmp_path / "odd.csv"), "--db", tmp_path / "s")
    assert code == 2
    one_line(code, err, "odd.csv")
    assert "'score' is outside [0, 1] at rows 1, 6" in err[0]
    assert state(tmp_path / "s") == before


# ------------------------------------------------------------------ processes sharing a store

HOLDER = """
import sys
from pkps_core.store import Store
store = Store(sys.argv[1], read_only=sys.argv[2] == "ro")
print("holding", flush=True)
sys.stdin.readline()
store.close()
print("released", flush=True)
"""


class Holder:
    """A separate process holding ``db`` open (read-write or read-only) until released."""

    def __init__(self, db, mode):
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(db), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.process.stdout.readline().strip() == "holding"

    def release(self):
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            assert self.process.stdout.readline().strip() == "released"
            self.process.wait(timeout=60)


@pytest.fixture
def populated(tmp_path, capsys):
    db = tmp_path / "shared.duckdb"
    code, _, _ = cli(capsys, "ingest", write(cache(["a/x", "b/y"]), tmp_path / "a.csv"), "--db", db)
    assert code == 0
    return db


@pytest.fixture
def holder():
    held = []

    def hold(db, mode):
        held.append(Holder(db, mode))
        return held[-1]

    yield hold
    for h in held:
        h.release()


@pytest.mark.slow
def test_readers_and_writers_wait_a_bounded_time_for_a_writing_process(
    tmp_path, capsys, monkeypatch, populated, holder
):
    before = state(populated)
    held = holder(populated, "rw")
    pid = held.process.pid
    monkeypatch.setenv("PKPS_STORE_WAIT", "1")
    extra = write(cache(["c/z"]), tmp_path / "c.csv")
    for args in (["info", "--db", populated], ["ingest", extra, "--db", populated]):
        started = time.monotonic()
        code, _, err = cli(capsys, *args)
        assert time.monotonic() - started < 30
        assert code == 2 and len(err) == 2, err
        assert err[0].startswith(f"waiting for process {pid} to release the store")
        assert err[1].startswith("error: ") and f"in use by process {pid}" in err[1]
        assert "PKPS_STORE_WAIT" in err[1]
    held.release()
    assert state(populated) == before


@pytest.mark.slow
def test_many_readers_at_once_and_a_writer_waits_for_them(
    tmp_path, capsys, monkeypatch, populated, holder
):
    held = holder(populated, "ro")
    code, out, err = cli(capsys, "info", "--db", populated)
    assert code == 0 and err == [] and "2 models" in out
    monkeypatch.setenv("PKPS_STORE_WAIT", "1")
    code, _, err = cli(
        capsys, "ingest", write(cache(["c/z"]), tmp_path / "c.csv"), "--db", populated
    )
    assert code == 2 and f"in use by process {held.process.pid}" in err[-1]


@pytest.mark.slow
def test_a_waiting_writer_goes_ahead_once_the_holder_is_done(tmp_path, populated, holder):
    held = holder(populated, "rw")
    extra = write(cache(["c/z"]), tmp_path / "c.csv")
    writer = subprocess.Popen(
        [sys.executable, "-m", "pkps_core", "ingest", extra, "--db", str(populated)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "PKPS_STORE_WAIT": "120"},
    )
    assert writer.stderr.readline().startswith("waiting for process")
    held.release()
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert "c.csv: 8 added" in out
    assert state(populated)[2]["models"] == 3


def test_a_read_only_store_embeds_in_memory_and_writes_nothing(tmp_path, populated):
    with duckdb.connect(str(populated), read_only=True) as connection:
        assert connection.execute("SELECT count(*) FROM embeddings").fetchone() == (0,)
    before = populated.read_bytes()
    with Store(populated, read_only=True) as store:
        records = store.records()
        with pytest.raises(StoreError, match="read-only"):
            store.ingest(cache(["c/z"]))
    assert records["response_embedding"].notna().all()
    assert populated.read_bytes() == before
    # In one process, a reader next to a writer shares the writer's instance.
    with Store(populated) as writer, Store(populated, read_only=True) as reader:
        assert reader.summary() == writer.summary()


# ------------------------------------------------------------------ score-only caches, names


def test_a_score_only_cache_is_predicted_by_the_methods_that_need_no_text(tmp_path, capsys):
    frame = cache(["a/x", "a/x2", "b/y", "b/y2", "c/z", "c/z2"], n_queries=6, query=False)
    frame = frame.drop(columns="response")
    source = write(frame, tmp_path / "scores.csv")
    out = tmp_path / "p.csv"
    code, _, err = cli(capsys, "predict", "--input", source, "--out", out)
    assert code == 0, err
    predictions = pd.read_csv(out, keep_default_na=False, na_values=[""])
    pkps = predictions[predictions["method"] == "pkps"]
    assert pkps["prediction"].isna().all()
    assert pkps["note"].str.contains("PKPS needs query text or query embeddings").all()
    for method in ("sample", "dkps"):
        rows = predictions[predictions["method"] == method]
        assert rows["prediction"].notna().all(), method
    dkps = predictions[predictions["method"] == "dkps"]
    assert dkps["lower"].notna().all() and (dkps["lower"] <= dkps["upper"]).all()
    code, _, err = cli(
        capsys,
        "predict",
        "--input",
        source,
        "--out",
        out,
        "--methods",
        "ensemble,mean",
        "--targets",
        "c/z,c/z2",
    )
    assert code == 0, err
    ensemble = pd.read_csv(out).query("method == 'ensemble'")
    assert ensemble["prediction"].notna().all()


def test_next_prints_names_with_terminal_escapes_as_visible_text(tmp_path, capsys):
    evil = "evil\x1b]0;pwned\x07\x1b[31m/red"
    frame = cache(["a/x", "a/x2", "b/y", "b/y2", evil], n_queries=6)
    frame["task"] = frame["task"].where(frame["task"] != "t2", "task\x1b[2J")
    frame = frame[~((frame["model"] == evil) & (frame["query_id"].isin(["q4", "q5"])))]
    source = write(frame, tmp_path / "evil.csv")
    code, out, err = cli(capsys, "next", "--input", source, "--target", evil, "--top", "2")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;pwned\\x07\\x1b[31m/red" in out
    assert "task\\x1b[2J" in out
    code, _, err = cli(capsys, "next", "--input", source, "--target", "\x1b[31mnobody")
    assert code == 2 and "\x1b" not in err[0] and "\\x1b[31mnobody" in err[0]


def test_a_store_that_does_not_hold_its_file_lets_other_processes_write(tmp_path, populated):
    """The app's way of opening (``hold=False``): between two of its operations another
    process may ingest, and the next read sees the new rows."""
    with Store(populated, hold=False) as app_store:
        version = app_store.version
        done = subprocess.run(
            [sys.executable, "-m", "pkps_core", "ingest", write(cache(["c/z"]), tmp_path / "c.csv")]
            + ["--db", str(populated)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**__import__("os").environ, "PKPS_STORE_WAIT": "5"},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert app_store.version == version + 1
        assert app_store.summary()["models"] == 3
        app_store.ingest(cache(["d/w"]), source="app")
    assert state(populated)[2]["models"] == 4


def test_without_reference_scores_the_reference_is_the_sample_score_and_the_cli_says_so(
    tmp_path, capsys
):
    models = ["a/x", "a/x2", "b/y", "b/y2", "c/z", "c/z2"]
    source = write(cache(models, n_queries=6), tmp_path / "noref.csv")
    out = tmp_path / "p.csv"
    code, printed, err = cli(
        capsys, "predict", "--input", source, "--out", out, "--targets", "c/z", "--no-interval"
    )
    assert code == 0, err
    # the target keeps --budget (4) of its 6 responses per task and is judged against the
    # mean of all 6 (its full data), never against what its prediction saw
    assert "MAE against each target cell's full-data score" in printed
    predictions = pd.read_csv(out)
    references = predictions[predictions["model"] != "c/z"]
    assert references["reference_score"].notna().all()
    assert (references["reference_score"] == references["sample_score"]).all()
    target = predictions[predictions["model"] == "c/z"].set_index("task")
    full = pd.read_csv(source).query("model == 'c/z'").groupby("task")["score"].mean()
    assert (target["n_responses"] == 4).all()
    assert (target["reference_score"] == full.loc[target.index]).all()
    with_column = cache(models, n_queries=6).assign(reference_score=0.5)
    code, printed, _ = cli(
        capsys,
        "predict",
        "--input",
        write(with_column, tmp_path / "ref.csv"),
        "--out",
        out,
        "--no-interval",
    )
    assert code == 0 and "MAE against reference_score" in printed
    assert (pd.read_csv(out)["reference_score"] == 0.5).all()


def test_a_store_on_a_read_only_file_system_is_read_but_not_written(mounted, tmp_path, capsys):
    """Writers refuse it in one line saying why (not "not a DuckDB store file"); readers
    open it read-only as before."""
    point = mounted("size=8m")
    store = point / "s.duckdb"
    source = tmp_path / "one.csv"
    source.write_text("model,task,query_id,query,response,score\nm1,t,q1,a,b,1\n")
    assert main(["ingest", str(source), "--db", str(store)]) == 0
    remount = ["mount", "-o", "remount,ro", str(point)]
    assert subprocess.run(remount, capture_output=True).returncode == 0
    capsys.readouterr()
    for command in (["fit", "--db", str(store)], ["ingest", str(source), "--db", str(store)]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: cannot ") and str(store) in err[0]
        assert "Read-only file system" in err[0] and "not a DuckDB store" not in err[0]
    assert main(["info", "--db", str(store)]) == 0
    assert capsys.readouterr().out.startswith("1 model, 1 task, 1 response")
