"""Importers: every sample format maps known rows into the canonical record."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pkps_core.importers import FORMATS, detect_format, load
from pkps_core.records import RecordsError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FORMATS_DIR = DATA / "formats"
ALPACA = DATA / "alpaca_eval"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def row(records: pd.DataFrame, task: str, query_id: str) -> pd.Series:
    match = records[(records["task"] == task) & (records["query_id"] == query_id)]
    assert len(match) == 1, f"expected one row for ({task}, {query_id}), got {len(match)}"
    return match.iloc[0]


def test_eee_v030_with_aggregate():
    folder = need(FORMATS_DIR / "eee_v0.3.0")
    result = load(folder)
    assert result.formats == {"eee": 1}
    known = row(result.records, "demo-source.demo_bench", "demo_0001")
    assert known["model"] == "demo-org/demo-model"
    assert known["query"] == "What is 2 + 2?"
    assert known["response"] == "The answer is 4."
    assert known["score"] == 1.0
    assert known["family"] == "demo-org"
    assert "lower_is_better" not in result.records.columns  # the aggregate says higher


def test_eee_lower_is_better_is_stored_as_one_minus_score(tmp_path):
    folder = need(FORMATS_DIR / "eee_v0.3.0")
    for source in folder.iterdir():
        shutil.copy(source, tmp_path / source.name)
    aggregate = next(p for p in tmp_path.glob("*.json") if "schema" not in p.name)
    document = json.loads(aggregate.read_text())
    document["evaluation_results"][0]["metric_config"]["lower_is_better"] = True
    aggregate.write_text(json.dumps(document))
    result = load(tmp_path)
    assert result.records["score"].tolist() == [0.0]
    assert "lower_is_better" not in result.records.columns
    assert any("lower-is-better metric; stored 1 − score" in w for w in result.warnings)


def test_eee_v021_samples():
    folder = need(FORMATS_DIR / "eee_v0.2.1_samples")
    records = load(folder).records
    assert len(records) == 25
    assert set(records["task"]) == {"hellaswag", "mmlu", "narrativeqa"}
    known = row(records, "mmlu", "id222")
    assert known["model"] == "openai/gpt2"
    assert known["query"].startswith("The following are multiple choice questions")
    assert known["response"] == " D"
    assert known["score"] == 1.0
    narrative = row(records, "narrativeqa", "id1514")
    assert narrative["response"] == " The Wilsons."
    assert narrative["score"] == 0.0


def test_eee_int_sample_id_and_gzip(tmp_path):
    item = {
        "schema_version": "0.2.0",
        "model_id": "org/m",
        "evaluation_name": "bench",
        "sample_id": 7,
        "input": {"raw": "Q?", "reference": "A"},
        "output": {"raw": ["A"]},
        "evaluation": {"score": None, "is_correct": True},
    }
    path = tmp_path / "run_samples.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(item) + "\n{not json\n").encode()))
    result = load(path)
    known = row(result.records, "bench", "7")
    assert (known["query"], known["response"], known["score"]) == ("Q?", "A", 1.0)
    assert any("not valid JSON" in s and "line 2" in s for s in result.skipped)


def test_lm_eval_samples():
    folder = need(FORMATS_DIR / "lm_eval")
    records = load(folder).records
    assert len(records) == 10
    known = row(records, "math_perturbed_full", "0")
    assert known["model"] == (
        "RylanSchaeffer/mem_Qwen3-93M_minerva_math_rep_0_sbst_1.0000_epch_1_ot_1"
    )
    assert known["query"] == (
        "Problem: How many vertical asymptotes does the graph of $y=\\frac{2}{x^3-x}$ have?"
        "\n\nSolution:"
    )
    assert known["response"].startswith(" 1. The graph of $y=1.")
    assert known["score"] == 0.0


def test_lm_eval_loglikelihood_picks_best_continuation(tmp_path):
    item = {
        "doc_id": 3,
        "arguments": {
            "gen_args_0": {"arg_0": "Sky is", "arg_1": " green"},
            "gen_args_1": {"arg_0": "Sky is", "arg_1": " blue"},
        },
        "resps": [[[-5.0, False]], [[-1.0, True]]],
        "filtered_resps": [[-5.0, False], [-1.0, True]],
        "filter": "none",
        "metrics": ["acc"],
        "acc": 1.0,
    }
    path = tmp_path / "org__model" / "samples_colors_2025-01-01T00-00-00.000001.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(item) + "\n")
    result = load(path)
    known = row(result.records, "colors", "3")
    assert (known["model"], known["query"], known["response"]) == ("org/model", "Sky is", " blue")
    assert known["score"] == 1.0
    assert any("folder name" in w for w in result.warnings)


def test_helm_run_folder():
    folder = need(FORMATS_DIR / "helm_run")
    result = load(folder)
    records = result.records
    assert len(records) == 10
    task = "mmlu:subject=philosophy,method=multiple_choice_joint"
    known = row(records, task, "id147")
    assert known["model"] == "openai/gpt2"
    assert known["query"].startswith("What does the notion of “meaning in life” refer to?")
    assert known["query"].endswith("C. internalmeaning\nD. meaning in an afterlife")
    assert known["response"] == " D"
    assert known["score"] == 0.0
    # The same run exported to Every Eval Ever scores id222 as correct.
    assert row(records, task, "id222")["score"] == 1.0


def test_inspect_logs():
    folder = need(FORMATS_DIR / "inspect")
    records = load(folder).records
    assert set(records["task"]) == {"arc_easy", "pubmedqa"}
    arc = row(records, "arc_easy", "1")
    assert arc["model"] == "ollama/qwen2.5:0.5b"
    assert arc["query"].startswith("Which statement best explains why photosynthesis")
    assert arc["query"].endswith("D) The producers in all ecosystems are plants.")
    assert arc["response"].startswith("ANSWER: A\n\nExplanation:")
    assert arc["score"] == 1.0  # Inspect's "C" (correct)
    assert row(records, "arc_easy", "2")["score"] == 0.0  # "I" (incorrect)
    pubmed = row(records, "pubmedqa", "12377809")
    assert pubmed["model"] == "openai/azure/gpt-4o-mini"
    assert pubmed["response"] == "ANSWER: A"
    assert pubmed["score"] == 1.0


def _alpaca_expected(models):
    frame = pd.read_parquet(need(ALPACA / "alpaca_eval_40.parquet"))
    return frame[frame["model"].isin(models)]


def _assert_alpaca_matches(records, expected):
    key = ["model", "task", "query_id"]
    got = records.sort_values(key).reset_index(drop=True)
    want = expected.sort_values(key).reset_index(drop=True)
    assert len(got) == len(want)
    for column in ("model", "task", "query_id", "query", "response"):
        assert got[column].tolist() == want[column].tolist(), column
    np.testing.assert_allclose(got["score"], want["score"], rtol=0, atol=1e-9)


def test_alpaca_eval_one_model_matches_parquet():
    folder = need(ALPACA / "upstream_format" / "results" / "vicuna-13b")
    result = load(folder)
    assert result.formats == {"alpaca_eval": 805}
    _assert_alpaca_matches(result.records, _alpaca_expected(["vicuna-13b"]))


def test_alpaca_eval_results_match_parquet_exactly():
    folder = need(ALPACA / "upstream_format" / "results")
    assert detect_format(folder) == "alpaca_eval"
    result = load(folder)
    _assert_alpaca_matches(result.records, _alpaca_expected(["vicuna-13b", "gemma-2b-it"]))


def test_whole_formats_folder_imports_everything():
    folder = need(FORMATS_DIR)
    result = load(folder)
    # helm: helm_run (10) and helm_generation (5); inspect: 5 JSON-log and 11 .eval rows
    assert result.formats == {"eee": 26, "lm_eval": 10, "helm": 15, "inspect": 16}
    assert result.skipped == []  # schemas and sidecars are recognised, not skipped


def test_canonical_csv_with_json_embeddings(tmp_path):
    path = tmp_path / "cache.csv"
    path.write_text(
        "model,task,query_id,query,response_embedding,score\n"
        'm1,t,1,"Q one","[0.5, 1.5]",1\n'
        'm2,t,1,"Q one","[1.0, 0.0]",0\n'
    )
    assert detect_format(path) == "canonical"
    records = load(path).records
    np.testing.assert_array_equal(records["response_embedding"][0], [0.5, 1.5])
    assert records["query_id"].tolist() == ["1", "1"]


def test_canonical_parquet(tmp_path):
    path = tmp_path / "cache.parquet"
    pd.DataFrame(
        {"model": ["a"], "task": ["t"], "query_id": ["q"], "response": ["r"], "score": [0.25]}
    ).to_parquet(path)
    assert load(path).records["score"].item() == 0.25


def test_format_override_and_unknown_files(tmp_path):
    odd = tmp_path / "export.data"
    odd.write_text("model,task,query_id,response,score\na,t,q,r,1\n")
    with pytest.raises(RecordsError, match="cannot tell the format"):
        load(odd)
    with pytest.raises(RecordsError, match="unknown format 'xml'"):
        load(odd, format="xml")
    with pytest.raises(RecordsError, match="not found"):
        load(tmp_path / "missing.csv")
    assert set(FORMATS) >= {"canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval"}


def test_folder_reports_unrecognised_files(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "cache.csv").write_text("model,task,query_id,response,score\na,t,q,r,1\n")
    result = load(tmp_path)
    assert result.formats == {"canonical": 1}
    assert result.skipped == ["notes.txt: 1 item skipped — not a recognised evaluation file"]


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(RecordsError, match="nothing to import"):
        load(tmp_path)
