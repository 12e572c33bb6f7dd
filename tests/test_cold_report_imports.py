"""A fresh ``report --model`` process on a store with a kept fit imports neither
scikit-learn nor scipy.stats (about a second together on this machine): it reads stored
vectors and the kept fit, and neither embedding texts nor fitting a space is needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from cli_in_process import run_in_process

from pkps_core.embed import default_embedder
from pkps_core.store import Store
from pkps_core.store.embeddings import DEFAULT_EMBEDDER_NAME
from pkps_core.synthetic import make_synthetic

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sklearn", "scipy.stats")
PROBE = """
import json, runpy, sys
sys.argv = ["pkps_core", *sys.argv[1:]]
try:
    runpy.run_module("pkps_core", run_name="__main__")
except SystemExit as stop:
    assert not stop.code, stop.code
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "sklearn"
                        or m.startswith("scipy.stats"))))
"""


def _text_records() -> pd.DataFrame:
    """A synthetic cache whose queries and responses are texts (no vectors)."""
    records = make_synthetic(n_models=10, n_tasks=2, budget=8, random_state=1).records
    records = records.drop(columns=["query_embedding", "response_embedding"], errors="ignore")
    records["query"] = "question " + records["query_id"].astype(str) + " of " + records["task"]
    style = records["model"].str[-1].map(lambda digit: "detail " * (int(digit) % 5))
    records["response"] = "answer of " + records["model"] + " to " + records["query"] + style
    return records


def test_the_default_embedders_name_is_known_without_building_it():
    assert DEFAULT_EMBEDDER_NAME == default_embedder().name


def test_a_cold_report_of_a_kept_fit_imports_no_sklearn_and_says_the_same(tmp_path):
    path = tmp_path / "texts.duckdb"
    records = _text_records()
    with Store(path) as store:
        store.ingest(records, source="texts")
    fitted = run_in_process("fit", "--db", str(path), "--no-leaderboard")
    assert fitted.returncode == 0, fitted.stderr
    model = sorted(records["model"].unique())[4]
    here = run_in_process("report", "--db", str(path), "--model", model)
    assert here.returncode == 0, here.stderr
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "report", "--db", str(path), "--model", model],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    *report, imported = done.stdout.strip().splitlines()
    assert json.loads(imported) == []
    # the same report as in a process that had scikit-learn loaded (but the timing line)
    same = [line for line in report if not line.startswith("(")]
    assert same == [line for line in here.stdout.strip().splitlines() if not line.startswith("(")]
    assert same[0].startswith(f"{model}: predicted overall score ")
