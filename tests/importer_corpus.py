"""Two-record files per importer format, built by hand after the sample files' structure.

The structure follows ``/work/shared/data/formats`` (and AlpacaEval's ``results/``), so the
tests that use it run without those files. Each format has ``parts()`` — the lists of
records a file holds, two valid records each — and a writer that lays them out in a
folder the way the tool does and returns the path to import.
"""

import json
from collections.abc import Callable
from pathlib import Path

STAMP = "2025-01-01T00-00-00.000001"


def _lm_eval_item(doc_id: int) -> dict:
    return {
        "doc_id": doc_id,
        "doc": {"question": f"Q{doc_id}"},
        "target": "4",
        "arguments": {"gen_args_0": {"arg_0": f"Q{doc_id}", "arg_1": {"until": ["\n"]}}},
        "resps": [[f"A{doc_id}"]],
        "filtered_resps": [f"A{doc_id}"],
        "filter": "none",
        "metrics": ["exact_match"],
        "exact_match": 1.0,
    }


def lm_eval_parts() -> dict[str, list]:
    return {"samples": [_lm_eval_item(0), _lm_eval_item(1)]}


def write_lm_eval(folder: Path, parts: dict, *, lower_is_better: bool = False) -> Path:
    results = {
        "model_name": "org/model",
        "higher_is_better": {"bench": {"exact_match": not lower_is_better}},
    }
    (folder / f"results_{STAMP}.json").write_text(json.dumps(results))
    path = folder / f"samples_bench_{STAMP}.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in parts["samples"]))
    return path


def _eee_item(number: int) -> dict:
    return {
        "schema_version": "0.3.0",
        "evaluation_id": "src/org_model/1",
        "model_id": "org/model",
        "evaluation_name": "src.bench",
        "evaluation_result_id": "src.bench",
        "sample_id": f"s{number}",
        "interaction_type": "single_turn",
        "input": {"raw": f"Q{number}", "reference": ["4"]},
        "output": {"raw": [f"A{number}"]},
        "evaluation": {"score": 0.25, "is_correct": False},
        "metadata": {"subject": "arithmetic"},
    }


def eee_parts() -> dict[str, list]:
    return {"samples": [_eee_item(0), _eee_item(1)]}


UUID = "f3a1c0de-0000-4000-8000-000000000000"


def write_eee(folder: Path, parts: dict, *, lower_is_better: bool = False) -> Path:
    aggregate = {
        "schema_version": "0.3.0",
        "evaluation_id": "src/org_model/1",
        "model_info": {"name": "model", "id": "org/model"},
        "evaluation_results": [
            {
                "evaluation_result_id": "src.bench",
                "evaluation_name": "src.bench",
                "metric_config": {
                    "metric_id": "error_rate",
                    "lower_is_better": lower_is_better,
                    "min_score": 0.0,
                    "max_score": 1.0,
                },
                "score_details": {"score": 0.25},
            }
        ],
    }
    (folder / f"{UUID}.json").write_text(json.dumps(aggregate))
    path = folder / f"{UUID}_samples.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in parts["samples"]))
    return path


def _helm_state(instance_id: str) -> dict:
    return {
        "instance": {
            "input": {"text": f"Q {instance_id}"},
            "references": [{"output": {"text": "yes"}, "tags": ["correct"]}],
            "split": "test",
            "id": instance_id,
        },
        "train_trial_index": 0,
        "output_mapping": {"A": "yes", "B": "no"},
        "request": {"model": "org/model", "prompt": f"Q {instance_id}"},
        "result": {"success": True, "completions": [{"text": f" A{instance_id}"}]},
    }


def _helm_stats(instance_id: str) -> dict:
    return {
        "instance_id": instance_id,
        "train_trial_index": 0,
        "stats": [{"name": {"name": "exact_match", "split": "test"}, "count": 1, "mean": 1.0}],
    }


def helm_parts() -> dict[str, list]:
    return {
        "request_states": [_helm_state("id0"), _helm_state("id1")],
        "stats": [_helm_stats("id0"), _helm_stats("id1")],
    }


def write_helm(folder: Path, parts: dict) -> Path:
    run = folder / "run"
    run.mkdir()
    state = {"adapter_spec": {"model": "org/model"}, "request_states": parts["request_states"]}
    (run / "scenario_state.json").write_text(json.dumps(state))
    (run / "per_instance_stats.json").write_text(json.dumps(parts["stats"]))
    spec = {
        "name": "bench:subject=x,model=org_model",
        "metric_specs": [{"args": {"names": ["exact_match"]}}],
    }
    (run / "run_spec.json").write_text(json.dumps(spec))
    return run


def inspect_sample(sample_id: int) -> dict:
    return {
        "id": sample_id,
        "epoch": 1,
        "input": [{"role": "user", "content": f"Q{sample_id}"}],
        "choices": ["yes", "no"],
        "target": "A",
        "output": {
            "model": "model",
            "choices": [
                {
                    "message": {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
                    "stop_reason": "stop",
                }
            ],
            "completion": "A",
        },
        "scores": {"choice": {"value": "C", "answer": "A"}},
    }


def inspect_parts() -> dict[str, list]:
    return {"samples": [inspect_sample(1), inspect_sample(2)]}


def write_inspect(folder: Path, parts: dict) -> Path:
    document = {
        "version": 2,
        "status": "success",
        "eval": {"task": "evals/bench", "model": "org/model", "scorers": [{"name": "choice"}]},
        "samples": parts["samples"],
    }
    path = folder / "log.json"
    path.write_text(json.dumps(document))
    return path


def _alpaca_output(number: int) -> dict:
    return {
        "instruction": f"Q{number}",
        "output": f"A{number}",
        "generator": "org/model",
        "dataset": "helpful_base",
    }


def _alpaca_annotation(number: int) -> dict:
    return {
        "instruction": f"Q{number}",
        "output_1": "reference",
        "output_2": f"A{number}",
        "generator_2": "org/model",
        "preference": 1.75,
    }


def alpaca_parts() -> dict[str, list]:
    return {
        "outputs": [_alpaca_output(0), _alpaca_output(1)],
        "annotations": [_alpaca_annotation(0), _alpaca_annotation(1)],
    }


def write_alpaca(folder: Path, parts: dict) -> Path:
    model = folder / "results" / "model"
    (model / "weighted_alpaca_eval_gpt4_turbo").mkdir(parents=True)
    (model / "model_outputs.json").write_text(json.dumps(parts["outputs"]))
    annotations = model / "weighted_alpaca_eval_gpt4_turbo" / "annotations.json"
    annotations.write_text(json.dumps(parts["annotations"]))
    return folder / "results"


def lm_eval_resps_parts() -> dict[str, list]:
    """Older lm-eval samples: ``resps`` only, no ``filtered_resps``."""
    items = [_lm_eval_item(0), _lm_eval_item(1)]
    for item in items:
        del item["filtered_resps"]
    return {"samples": items}


# format -> (parts, writer, the first record's (task, query_id, response))
FORMATS: dict[str, tuple[Callable[[], dict], Callable[[Path, dict], Path], tuple]] = {
    "lm_eval": (lm_eval_parts, write_lm_eval, ("bench", "0", "A0")),
    "lm_eval_resps": (lm_eval_resps_parts, write_lm_eval, ("bench", "0", "A0")),
    "eee": (eee_parts, write_eee, ("src.bench", "s0", "A0")),
    "helm": (helm_parts, write_helm, ("bench:subject=x", "id0", " Aid0")),
    "inspect": (inspect_parts, write_inspect, ("bench", "1", "A")),
    "alpaca_eval": (alpaca_parts, write_alpaca, ("helpful_base", "alpaca-0", "A0")),
}
PARTS = [(kind, name) for kind, (parts, _, _) in FORMATS.items() for name in parts()]
