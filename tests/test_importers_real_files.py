"""Importers on the files users really have (issue 36).

Inspect's default ``.eval`` logs, one unreadable file in a folder, HELM's main metric,
lighteval details, any AlpacaEval annotator, unscored and sample-less Inspect logs. The
shared real files are used where they exist (skipped when absent); the rest are fixtures
built to the upstream writers' schemas.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_in_process import run_in_process
from importer_corpus import FORMATS, inspect_sample, write_alpaca

from pkps_core.importers import detect_format, load
from pkps_core.records import RecordsError

ROOT = Path(__file__).resolve().parents[1]
FORMATS_DIR = ROOT.parent / "shared" / "data" / "formats"
INSPECT_EVAL = FORMATS_DIR / "inspect_eval"
NARRATIVE_QA = FORMATS_DIR / "helm_generation"
LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 12345\n"
)


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


def notes(done) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.strip().startswith("note:")]


# ------------------------------------------------------------------ 1: Inspect .eval logs


HEADER = {
    "version": 2,
    "status": "success",
    "eval": {"task": "evals/bench", "model": "org/model", "scorers": [{"name": "choice"}]},
}


def write_eval_log(path: Path, samples: list[dict], *, finished: bool = True) -> Path:
    """An ``.eval`` archive laid out as Inspect writes it."""
    with zipfile.ZipFile(path, "w") as archive:
        start = {key: HEADER[key] for key in ("version", "eval")}
        archive.writestr("_journal/start.json", json.dumps(start))
        for sample in samples:
            archive.writestr(
                f"samples/{sample['id']}_epoch_{sample['epoch']}.json", json.dumps(sample)
            )
        if finished:
            archive.writestr("header.json", json.dumps(HEADER))
            archive.writestr("summaries.json", "[]")
            archive.writestr("reductions.json", "[]")
    return path


def test_the_shared_eval_logs_import_with_their_scores(tmp_path):
    folder = need(INSPECT_EVAL)
    result = load(folder)
    assert len(result.records) == 11
    assert result.formats == {"inspect": 11}
    assert result.records["score"].notna().all()
    assert set(result.records["score"]) <= {0.0, 1.0}
    assert set(result.records["model"]) == {"openai/gpt-4o", "openai/gpt-4o-mini"}


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "journal-only"])
def test_an_eval_log_maps_like_its_json_log(tmp_path, finished):
    samples = [inspect_sample(1), inspect_sample(2)]
    path = write_eval_log(tmp_path / "run.eval", samples, finished=finished)
    assert detect_format(path) == "inspect"
    as_eval = load(path)
    as_json = load(FORMATS["inspect"][1](tmp_path, {"samples": samples}))
    columns = ["model", "task", "query_id", "query", "response", "score"]
    assert as_eval.records[columns].equals(as_json.records[columns])
    if not finished:
        assert any("not 'success'" in w for w in as_eval.warnings)


# ------------------------------------------------------------------ 2: one bad file


@pytest.mark.slow
def test_one_damaged_file_in_a_folder_is_named_and_the_rest_imported(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_eval_log(folder / "a.eval", [inspect_sample(1), inspect_sample(2)])
    (folder / "details.parquet").write_text(LFS_POINTER)
    done = run("ingest", folder, "--db", tmp_path / "store.duckdb")
    assert done.returncode == 0, done.stderr
    assert "2 added" in done.stdout
    assert len(notes(done)) == 1 and "details.parquet" in notes(done)[0]
    assert "Git LFS pointer" in notes(done)[0]

    alone = run("ingest", folder / "details.parquet", "--db", tmp_path / "other.duckdb")
    assert alone.returncode == 2 and alone.stderr.startswith("error: ")
    assert "Git LFS pointer" in alone.stderr


def test_the_shared_eval_logs_beside_a_damaged_file(tmp_path):
    folder = tmp_path / "logs"
    shutil.copytree(need(INSPECT_EVAL), folder)
    (folder / "details.parquet").write_text(LFS_POINTER)
    done = run("ingest", folder, "--db", tmp_path / "store.duckdb")
    assert done.returncode == 0, done.stderr
    assert "11 added" in done.stdout
    assert len(notes(done)) == 1 and "details.parquet" in notes(done)[0]


# ------------------------------------------------------------------ 3: HELM's main metric


def test_narrative_qa_is_scored_by_f1_and_says_so():
    result = load(need(NARRATIVE_QA))
    assert any("'f1_score'" in w and "main metric" in w for w in result.warnings)
    assert 0.0 < result.records["score"].max() < 1.0  # graded, not exact match's 0/1
    old = load(NARRATIVE_QA, metric="exact_match")
    assert (old.records["score"] == 0.0).all()
    assert any("'exact_match'" in w and "--metric" in w for w in old.warnings)


def write_helm_run(folder: Path, groups: list[str]) -> Path:
    run_folder = folder / "run"
    run_folder.mkdir(parents=True)
    states = [
        {
            "instance": {"id": f"id{i}", "input": {"text": f"Q{i}"}},
            "train_trial_index": 0,
            "request": {"model": "org/model"},
            "result": {"completions": [{"text": f"A{i}"}]},
        }
        for i in range(2)
    ]
    stats = [
        {
            "instance_id": f"id{i}",
            "train_trial_index": 0,
            "stats": [
                {"name": {"name": "exact_match", "split": "test"}, "mean": 0.0},
                {"name": {"name": "f1_score", "split": "test"}, "mean": 0.25 * (i + 1)},
            ],
        }
        for i in range(2)
    ]
    spec = {
        "name": "narrative_qa:model=org_model",
        "groups": groups,
        "metric_specs": [{"args": {"names": ["exact_match", "f1_score"]}}],
    }
    (run_folder / "scenario_state.json").write_text(json.dumps({"request_states": states}))
    (run_folder / "per_instance_stats.json").write_text(json.dumps(stats))
    (run_folder / "run_spec.json").write_text(json.dumps(spec))
    return run_folder


def test_helm_uses_the_groups_main_metric_and_lets_the_user_choose(tmp_path):
    folder = write_helm_run(tmp_path, ["narrative_qa"])
    assert load(folder).records["score"].tolist() == [0.25, 0.5]
    assert load(folder, metric="exact_match").records["score"].tolist() == [0.0, 0.0]
    with pytest.raises(RecordsError, match="no metric 'rouge_l'.*exact_match, f1_score"):
        load(folder, metric="rouge_l")
    done = run("ingest", folder, "--db", tmp_path / "s.duckdb", "--metric", "exact_match")
    assert done.returncode == 0, done.stderr
    assert "'exact_match'" in done.stdout


# ------------------------------------------------------------------ 4: lighteval details


DATE = "2024-06-26T14-37-29.123456"


def write_lighteval_run(root: Path, *, results: bool = True) -> Path:
    """Two tasks of one run, with the columns of lighteval's ``DetailsLogger.Detail``."""
    run_folder = root / "details" / "org" / "model-7b" / DATE
    run_folder.mkdir(parents=True)
    common = {"instruction": ["", ""], "num_effective_few_shots": [25, 25]}
    common |= {"num_asked_few_shots": [25, 25], "truncated": [[0], [0]], "padded": [[0], [0]]}
    multiple_choice = pa.table(
        {
            "example": ["Which is a fruit?", "Which is blue?"],
            "full_prompt": ["Q: Which is a fruit?\nA:", "Q: Which is blue?\nA:"],
            # log-likelihood per choice, with whether it was the greedy continuation
            "predictions": [[[-1.0, 0.0], [-0.2, 1.0]], [[-0.1, 1.0], [-3.0, 0.0]]],
            "choices": [[" stone", " apple"], [" sky", " grass"]],
            "gold": [[], []],
            "gold_index": [[1], [1]],
            "metrics": [{"acc": 1.0, "acc_norm": 1.0}, {"acc": 0.0, "acc_norm": 1.0}],
            **common,
        }
    )
    generative = pa.table(
        {
            "example": ["2+2?", "3+3?"],
            "full_prompt": ["2+2?", "3+3?"],
            "predictions": [["4"], ["7"]],
            "choices": [[], []],
            "gold": [["4"], ["6"]],
            "gold_index": [[], []],
            "metrics": [{"em": 1.0, "f1": 1.0}, {"em": 0.0, "f1": 0.0}],
            **common,
        }
    )
    pq.write_table(
        multiple_choice, run_folder / f"details_leaderboard|arc:challenge|25_{DATE}.parquet"
    )
    pq.write_table(generative, run_folder / f"details_lighteval|gsm8k|5_{DATE}.parquet")
    if results:
        config = {"config_general": {"model_name": "org/model-7b"}, "results": {}}
        (run_folder / f"results_{DATE}.json").write_text(json.dumps(config))
    return root / "details"


def test_lighteval_details_map_to_records(tmp_path):
    folder = write_lighteval_run(tmp_path)
    result = load(folder)
    records = result.records.sort_values(["task", "query"]).reset_index(drop=True)
    assert result.formats == {"lighteval": 4}
    assert set(records["model"]) == {"org/model-7b"}
    assert (
        records["task"].tolist() == ["leaderboard|arc:challenge|25"] * 2 + ["lighteval|gsm8k|5"] * 2
    )
    # log-likelihood: the choice ranked highest; generative: the prediction text
    assert records["response"].tolist() == [" apple", " sky", "4", "7"]
    assert records["score"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert any("'acc'" in w and "first metric" in w for w in result.warnings)
    by_norm = load(folder, metric="acc_norm", format=None)
    arc = by_norm.records[by_norm.records["task"].str.contains("arc")]
    assert arc["score"].tolist() == [1.0, 1.0]


def test_lighteval_query_ids_are_shared_across_models(tmp_path):
    first = load(write_lighteval_run(tmp_path / "a")).records
    second_root = write_lighteval_run(tmp_path / "b", results=False)
    second = load(second_root).records
    assert set(second["model"]) == {"org/model-7b"}  # from the details/<org>/<model> folders
    assert sorted(first["query_id"]) == sorted(second["query_id"])


def test_a_lighteval_file_without_its_columns_says_what_is_missing(tmp_path):
    path = tmp_path / f"details_x|y|0_{DATE}.parquet"
    pq.write_table(pa.table({"example": ["q"]}), path)
    with pytest.raises(RecordsError, match="no predictions, metrics column"):
        load(path)


# ------------------------------------------------------------------ 5: any AlpacaEval annotator


def test_alpaca_eval_reads_another_annotator_and_names_it(tmp_path):
    results = write_alpaca(tmp_path, FORMATS["alpaca_eval"][0]())
    model = results / "model"
    (model / "weighted_alpaca_eval_gpt4_turbo").rename(model / "alpaca_eval_gpt4_turbo_fn")
    result = load(results)
    assert result.records["score"].notna().all()
    assert any("'alpaca_eval_gpt4_turbo_fn'" in w for w in result.warnings)


def test_alpaca_eval_with_several_annotators_takes_the_default_or_the_chosen(tmp_path):
    results = write_alpaca(tmp_path, FORMATS["alpaca_eval"][0]())
    model = results / "model"
    other = model / "alpaca_eval_gpt4_turbo_fn"
    other.mkdir()
    annotations = json.loads(
        (model / "weighted_alpaca_eval_gpt4_turbo" / "annotations.json").read_text()
    )
    for annotation in annotations:
        annotation["preference"] = 1.0
    (other / "annotations.json").write_text(json.dumps(annotations))

    default = load(results)
    assert any("also present: alpaca_eval_gpt4_turbo_fn" in w for w in default.warnings)
    chosen = load(results, annotator="alpaca_eval_gpt4_turbo_fn")
    assert chosen.records["score"].tolist() == [0.0, 0.0]
    assert default.records["score"].tolist() != chosen.records["score"].tolist()
    done = run(
        "ingest", results, "--db", tmp_path / "s.duckdb", "--annotator", "alpaca_eval_gpt4_turbo_fn"
    )
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ 6, 7: Inspect logs


def test_an_unscored_inspect_log_says_how_many_rows_have_no_score(tmp_path):
    samples = [inspect_sample(1), inspect_sample(2)]
    for sample in samples:
        del sample["scores"]
    result = load(write_eval_log(tmp_path / "run.eval", samples))
    assert result.records["score"].isna().all()
    assert any("2 row(s) without a score" in w and "no scorer" in w for w in result.warnings)


@pytest.mark.parametrize("kind", ["json", "eval"])
def test_an_inspect_log_without_samples_says_so_and_how_to_keep_them(tmp_path, kind):
    if kind == "json":
        path = tmp_path / "log.json"
        path.write_text(json.dumps({**HEADER, "results": {}}))
    else:
        path = write_eval_log(tmp_path / "run.eval", [])
    with pytest.raises(RecordsError, match="Inspect log with no samples.*log_samples"):
        load(path)
