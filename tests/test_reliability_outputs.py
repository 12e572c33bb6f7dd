"""Outputs under hostile conditions (issue 32, classes 2, 3 and 6).

- A write stopped partway (a file-size limit, ``RLIMIT_FSIZE``, in a subprocess; a full
  disk; a killed process) leaves the previous output intact, or no file.
- An output path that cannot be written (a directory, a path under a regular file, a
  read-only or full filesystem) is one ``error:`` line, exit 2, checked before the work.
- CSV exports neutralise cells a spreadsheet would run as formulas; the store and Parquet
  keep names verbatim.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core import views
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV-injection rule
HOSTILE = [
    '=HYPERLINK("http://x.test","click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "\tfam/tab",
    "\rfam/cr",
]


def run(*args, fsize: int | None = None, timeout: float = 300):
    """``python -m pkps_core ARGS`` as a user runs it under a file-size limit (``fsize``: a
    process of its own), else its answer from this process (:mod:`cli_in_process`; the
    file-size cases and the killed writer keep the process path checked)."""
    if fsize is None:
        return run_in_process(*args)

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "pkps_core", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
    )


def one_line_error(done, *needles) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    # progress lines ("  [ 40%] …" of evaluate) and notes may come before the error
    lines = [
        line for line in done.stderr.splitlines() if not line.lstrip().startswith(("[", "note:"))
    ]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def no_partials(folder: Path) -> None:
    left = [p.name for p in folder.rglob("*") if ".partial" in p.name or p.name.endswith(".old")]
    assert not left, left


def synthetic(n_models: int = 12, names: list[str] | None = None) -> pd.DataFrame:
    records = make_synthetic(n_models=n_models, n_tasks=3, budget=4, random_state=0).records
    records = records.drop(columns=["query_embedding", "response_embedding"])
    records["response"] = [f"answer {i % 7}" for i in range(len(records))]
    records["query"] = "question " + records["query_id"].astype(str)
    if names:
        models = list(dict.fromkeys(records["model"]))
        renamed = dict(zip(models, names, strict=False))
        records["model"] = records["model"].map(lambda m: renamed.get(m, m))
        records["family"] = records["model"]
    return records


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("outputs") / "cache.csv"
    synthetic().to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory, cache) -> Path:
    db = tmp_path_factory.mktemp("store") / "store.duckdb"
    done = run("ingest", cache, "--db", db)
    assert done.returncode == 0, done.stderr
    return db


def command(name: str, out: Path, cache: Path, store: Path) -> list:
    return {
        "synth-csv": ["synth", "--out", out, "--models", 12, "--tasks", 3],
        "synth-parquet": ["synth", "--out", out, "--models", 12, "--tasks", 3],
        "predict": ["predict", "--input", cache, "--out", out, "--methods", "sample,pkps"],
        "predict-parquet": ["predict", "--input", cache, "--out", out, "--methods", "sample"],
        "evaluate": [
            *("evaluate", "--input", cache, "--protocol", "query-efficiency", "--out", out),
            *("--budgets", "1", "--seeds", "1", "--methods", "sample"),
        ],
        "report-html": ["report", "--db", store, "--model", "fam0/model-00", "--out", out],
        "report-csv": ["report", "--db", store, "--model", "fam0/model-00", "--csv", out],
    }[name]


SUFFIX = {
    "synth-parquet": ".parquet",
    "predict-parquet": ".parquet",
    "report-html": ".html",
}
COMMANDS = [
    "synth-csv",
    "synth-parquet",
    "predict",
    "predict-parquet",
    "evaluate",
    "report-html",
    "report-csv",
]


# ------------------------------------------------------------------ class 2: atomic writes


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_a_write_stopped_by_a_file_size_limit_keeps_the_previous_output(
    tmp_path, cache, store, name
):
    out = tmp_path / f"out{SUFFIX.get(name, '.csv')}"
    done = run(*command(name, out, cache, store))
    assert done.returncode == 0, done.stderr
    before = out.read_bytes()
    assert len(before) > 400

    done = run(*command(name, out, cache, store), fsize=min(1024, len(before) // 2))
    one_line_error(done, str(out), "File too large")
    assert out.read_bytes() == before
    no_partials(tmp_path)


@pytest.mark.parametrize("name", ["synth-csv", "predict", "report-html"])
def test_a_write_stopped_by_a_file_size_limit_leaves_no_file(tmp_path, cache, store, name):
    out = tmp_path / "new" / f"out{SUFFIX.get(name, '.csv')}"
    done = run(*command(name, out, cache, store), fsize=1024)
    one_line_error(done, str(out))
    assert not out.exists()
    no_partials(tmp_path)


def test_a_process_killed_while_writing_keeps_the_previous_output(tmp_path):
    """The writer is killed (SIGKILL, as ``kill -9``) when the new table is written but not
    yet in place."""
    out = tmp_path / "table.csv"
    out.write_text("model,score\nold,1\n")
    script = (
        "import os, signal\n"
        "import pandas as pd\n"
        "from pkps_core.outputs import write_table\n"
        "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"write_table(pd.DataFrame({{'model': ['x' * 100] * 1000}}), {str(out)!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL
    assert out.read_text() == "model,score\nold,1\n"


@pytest.mark.slow
def test_export_replaces_a_dataset_only_once_the_new_one_is_complete(tmp_path, store):
    target = tmp_path / "dataset"
    done = run("export", "--db", store, "--to-parquet", target)
    assert done.returncode == 0, done.stderr
    before = {p.relative_to(target): p.read_bytes() for p in target.rglob("*.parquet")}

    done = run("export", "--db", store, "--to-parquet", target, fsize=1024)
    one_line_error(done, str(target))
    after = {p.relative_to(target): p.read_bytes() for p in target.rglob("*.parquet")}
    assert after == before
    no_partials(tmp_path)


# ------------------------------------------------------------------ class 3: OS errors


def bad_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("mine\n")
    (tmp_path / "a-folder").mkdir()
    return {"directory": tmp_path / "a-folder", "under-a-file": tmp_path / "a-file" / "x.csv"}


@pytest.mark.parametrize("kind", ["directory", "under-a-file"])
@pytest.mark.parametrize("name", ["synth-csv", "predict", "evaluate", "report-html", "report-csv"])
def test_an_output_that_cannot_be_a_file_is_one_line_before_the_work(
    tmp_path, cache, store, name, kind
):
    out = bad_paths(tmp_path)[kind]
    args = command(name, out, cache, store)
    if name.startswith("predict") or name == "evaluate":
        # the input is never read: the output is checked first
        args[args.index(cache)] = tmp_path / "no-such-input.csv"
    done = run(*args)
    one_line_error(done, str(out))
    assert (tmp_path / "a-file").read_text() == "mine\n"
    assert list((tmp_path / "a-folder").iterdir()) == []


@pytest.mark.parametrize("command_name", ["ingest", "predict", "report", "info", "export"])
def test_a_store_under_a_regular_file_is_one_line(tmp_path, cache, command_name):
    db = tmp_path / "a-file" / "store.duckdb"
    (tmp_path / "a-file").write_text("mine\n")
    args = {
        "ingest": ["ingest", cache, "--db", db],
        "predict": ["predict", "--db", db, "--out", tmp_path / "p.csv"],
        "report": ["report", "--db", db, "--model", "m"],
        "info": ["info", "--db", db],
        "export": ["export", "--db", db, "--to-parquet", tmp_path / "ds"],
    }[command_name]
    one_line_error(run(*args), str(db))
    assert (tmp_path / "a-file").read_text() == "mine\n"


@pytest.mark.slow
def test_export_into_a_file_or_a_folder_of_other_files_is_refused_before_reading(tmp_path, store):
    (tmp_path / "a-file").write_text("mine\n")
    one_line_error(run("export", "--db", store, "--to-parquet", tmp_path / "a-file"), "a-file")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me\n")
    one_line_error(run("export", "--db", store, "--to-parquet", notes), str(notes))
    assert (notes / "todo.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("name", ["synth-csv", "predict", "report-html"])
def test_an_output_on_a_read_only_filesystem_is_one_line_before_the_work(
    mounted, cache, store, name
):
    folder = mounted("ro,size=64k")
    out = folder / f"out{SUFFIX.get(name, '.csv')}"
    done = run(*command(name, out, cache, store), timeout=60)
    one_line_error(done, str(out), "Read-only file system")


def fill(path: Path) -> None:
    """Fill the file system of ``path`` to the last block."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(handle, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(handle)


@pytest.mark.parametrize("name", ["synth-csv", "predict", "report-html"])
def test_an_output_on_a_full_filesystem_keeps_the_previous_output(mounted, cache, store, name):
    folder = mounted("size=256k")
    out = folder / f"out{SUFFIX.get(name, '.csv')}"
    out.write_bytes(b"previous output\n")
    fill(folder / "filler")
    done = run(*command(name, out, cache, store))
    one_line_error(done, str(out), "No space left on device")
    assert out.read_bytes() == b"previous output\n"
    no_partials(folder)


@pytest.mark.slow
def test_ingest_into_a_store_on_a_full_filesystem_is_one_line_and_changes_nothing(
    mounted, tmp_path, cache
):
    folder = mounted("size=1m")
    db = folder / "store.duckdb"
    small = tmp_path / "small.csv"
    synthetic(n_models=3).query("task == 'task-00'").to_csv(small, index=False)
    assert run("ingest", small, "--db", db).returncode == 0
    with Store(db, read_only=True) as opened:
        before = opened.content_hash(), opened.version
    big = tmp_path / "big.csv"
    frame = synthetic(n_models=40)
    frame["response"] = [f"{i} " + "long answer text " * 60 for i in range(len(frame))]
    frame.to_csv(big, index=False)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024 - db.stat().st_size - 200 * 1024))

    done = run("ingest", big, "--db", db)
    one_line_error(done, str(db), "No space left on device")
    filler.unlink()
    with Store(db, read_only=True) as opened:
        assert (opened.content_hash(), opened.version) == before


# ------------------------------------------------------------------ class 6: formulas in CSV


def hostile_cache(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.csv"
    synthetic(names=HOSTILE).to_csv(path, index=False, lineterminator="\r\n")
    return path


def assert_inert(frame: pd.DataFrame) -> None:
    text = frame.select_dtypes(exclude="number").astype(str)
    for column in text.columns:
        risky = text[column].str.startswith(FORMULA_PREFIXES)
        assert not risky.any(), (column, text.loc[risky, column].tolist()[:3])


def read_exported_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, dtype=str)


@pytest.mark.slow
def test_predict_csv_neutralises_formulas_and_parquet_and_store_keep_names(tmp_path):
    source = hostile_cache(tmp_path)
    db = tmp_path / "store.duckdb"
    assert run("ingest", source, "--db", db).returncode == 0
    with Store(db, read_only=True) as opened:
        assert set(HOSTILE) <= set(opened.records(with_embeddings=False)["model"])

    csv_out, parquet_out = tmp_path / "p.csv", tmp_path / "p.parquet"
    for out in (csv_out, parquet_out):
        done = run("predict", "--db", db, "--out", out, "--methods", "sample", "--no-interval")
        assert done.returncode == 0, done.stderr
    exported = read_exported_csv(csv_out)
    assert_inert(exported)
    assert {"'" + name for name in HOSTILE} <= set(exported["model"])
    assert set(HOSTILE) <= set(pd.read_parquet(parquet_out)["model"])


@pytest.mark.slow
def test_report_csv_neutralises_formulas(tmp_path):
    source = hostile_cache(tmp_path)
    db = tmp_path / "store.duckdb"
    assert run("ingest", source, "--db", db).returncode == 0
    out = tmp_path / "rows.csv"
    done = run("report", "--db", db, "--model", HOSTILE[0], "--csv", out)
    assert done.returncode == 0, done.stderr
    rows = read_exported_csv(out)
    assert_inert(rows)
    assert set(rows["model"]) == {"'" + HOSTILE[0]}


def test_evaluate_csv_neutralises_formulas(tmp_path):
    out = tmp_path / "long.csv"
    done = run(*command("evaluate", out, hostile_cache(tmp_path), Path()))
    assert done.returncode == 0, done.stderr
    assert_inert(read_exported_csv(out))


def test_app_downloads_neutralise_csv_and_keep_parquet_verbatim():
    frame = pd.DataFrame({"model": HOSTILE, "prediction": [-0.5] * len(HOSTILE)})
    frame["=cmd"] = "x"
    shown = pd.read_csv(io.BytesIO(views.export_bytes(frame, "csv")), keep_default_na=False)
    assert shown["model"].tolist() == ["'" + name for name in HOSTILE]
    assert shown["prediction"].tolist() == [-0.5] * len(HOSTILE)
    assert "'=cmd" in shown.columns
    parquet = pd.read_parquet(io.BytesIO(views.export_bytes(frame, "parquet")))
    assert parquet["model"].tolist() == HOSTILE


def test_csv_safe_leaves_other_cells_and_the_input_alone():
    from pkps_core.outputs import csv_safe

    frame = pd.DataFrame({"a": ["ok", "=1+1", None, "a=b"], "n": [-1.0, 2.0, 3.0, 4.0]})
    safe = csv_safe(frame)
    assert safe["a"].tolist()[:2] == ["ok", "'=1+1"] and pd.isna(safe["a"][2])
    assert safe["a"][3] == "a=b"
    assert safe["n"].tolist() == [-1.0, 2.0, 3.0, 4.0]
    assert frame["a"].tolist()[1] == "=1+1"
    plain = pd.DataFrame({"a": ["x"]})
    assert csv_safe(plain) is plain
