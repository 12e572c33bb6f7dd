"""Importers on malformed input (issue 16): skip a bad record with a note, keep the rest.

Every input is generated in ``tmp_path`` from ``importer_corpus``: per format a small file
of two valid records, built by hand after the sample files' structure (so these tests run
without /work/shared/data); the sweep mangles the second record at every field (null, wrong
type, missing key) and the importer must keep the first record, with a note for whatever
it dropped. Mangled headers and sidecars may refuse the file, in one line. Also here:
Parquet text that is bytes or a list, and lower-is-better metrics.
"""

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from importer_corpus import (
    FORMATS,
    PARTS,
    STAMP,
    UUID,
    inspect_parts,
    inspect_sample,
    write_eee,
    write_lm_eval,
)

from pkps_core.importers import _LOADERS, load
from pkps_core.importers._common import _Log
from pkps_core.reading import read_records
from pkps_core.records import RecordsError, validate_records
from pkps_core.store import Store


def _mangled(record: object, depth: int = 99) -> Iterator[tuple[str, object]]:
    """(description, record) for every field of ``record`` nulled, mistyped or removed."""
    for value in (None, 5, "x", [], {}):
        yield f"record = {value!r}", value

    def walk(node: object, trail: tuple) -> Iterator[tuple]:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            yield (*trail, key)
            if isinstance(child, dict | list) and child and len(trail) + 1 < depth:
                yield from walk(child, (*trail, key))

    for trail in walk(record, ()) if isinstance(record, dict | list) else ():
        for value in ("<missing>", None, 5, "x", [], {}):
            copied = copy.deepcopy(record)
            parent = copied
            for key in trail[:-1]:
                parent = parent[key]
            if value == "<missing>":
                if not isinstance(parent, dict):
                    continue
                del parent[trail[-1]]
            else:
                parent[trail[-1]] = value
            yield f"{'.'.join(map(str, trail))} = {value!r}", copied


def _write(folder: Path, kind: str, parts: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return FORMATS[kind][1](folder, parts)


def _contract_breaches(frame: pd.DataFrame) -> list[str]:
    """What in an importer's frame would break the canonical record (or the store)."""
    breaches = []
    for column in ("model", "task", "query_id", "response"):
        if not frame[column].map(lambda v: isinstance(v, str)).all():
            breaches.append(f"{column} not all text")
    if not frame["query"].map(lambda v: isinstance(v, str) or pd.isna(v)).all():
        breaches.append("query neither text nor missing")
    if not frame["score"].map(lambda v: isinstance(v, float)).all():
        breaches.append("score not all float")
    return breaches


@pytest.mark.parametrize(("kind", "part"), PARTS)
def test_one_mangled_record_never_breaks_the_file(tmp_path, kind, part):
    # The format's own loader, not load(): validating ~100 two-row frames per case costs
    # more than the loading; the contract check stands in for validate_records, and the
    # named cases below go through load() in full.
    make_parts, _, expected = FORMATS[kind]
    loader = _LOADERS["lm_eval" if kind == "lm_eval_resps" else kind]
    task, query_id, response = expected
    failures = []
    for case, (description, record) in enumerate(_mangled(make_parts()[part][1])):
        parts = make_parts()
        parts[part][1] = record
        log = _Log()
        try:
            frame = loader(_write(tmp_path / str(case), kind, parts), log)
        except Exception as exc:  # noqa: BLE001 — the point is to catch every crash
            failures.append(f"{description}: {type(exc).__name__}: {exc}")
            continue
        first = frame[(frame["task"] == task) & (frame["query_id"] == query_id)]
        if len(first) != 1 or first["response"].iloc[0] != response:
            failures.append(f"{description}: the valid record was not kept")
        failures += [f"{description}: {breach}" for breach in _contract_breaches(frame)]
        if len(frame) < 2 and not log.lines():
            failures.append(f"{description}: a record was dropped without a note")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


def _with_second(kind: str, part: str, record: object, key: str | None = None) -> dict:
    """The format's parts with the second record replaced (or, given ``key``, its field)."""
    parts = FORMATS[kind][0]()
    if key is None:
        parts[part][1] = record
    elif record == "<missing>":
        del parts[part][1][key]
    else:
        parts[part][1][key] = record
    return parts


NAMED = {
    "lm-eval resps = 5": (
        "lm_eval_resps",
        _with_second("lm_eval_resps", "samples", 5, "resps"),
        f"samples_bench_{STAMP}.jsonl: 1 item skipped — no response text in "
        "filtered_resps/resps (e.g. line 2)",
    ),
    "HELM request state null": (
        "helm",
        _with_second("helm", "request_states", None),
        "scenario_state.json: 1 item skipped — request state is not an object "
        "(e.g. request state 1)",
    ),
    "HELM stats entry without instance_id": (
        "helm",
        _with_second("helm", "stats", "<missing>", "instance_id"),
        "per_instance_stats.json: 1 item skipped — stats entry without instance_id or "
        "train_trial_index (e.g. entry 1)",
    ),
    "Inspect sample a string": (
        "inspect",
        _with_second("inspect", "samples", "sample two"),
        "log.json: 1 item skipped — sample is not an object (e.g. sample 1)",
    ),
    "AlpacaEval output null": (
        "alpaca_eval",
        _with_second("alpaca_eval", "outputs", None),
        "model_outputs.json: 1 item skipped — output is not an object (e.g. output 1)",
    ),
    "AlpacaEval annotation null": (
        "alpaca_eval",
        _with_second("alpaca_eval", "annotations", None),
        "annotations.json: 1 item skipped — annotation is not an object (e.g. annotation 1)",
    ),
}


@pytest.mark.parametrize("case", list(NAMED))
def test_malformed_record_is_skipped_with_one_line(tmp_path, case):
    kind, parts, line = NAMED[case]
    result = load(_write(tmp_path, kind, parts))
    assert result.skipped == [line]
    task, query_id, response = FORMATS[kind][2]
    first = result.records[result.records["query_id"] == query_id]
    assert (first["task"].item(), first["response"].item()) == (task, response)
    if case == "HELM stats entry without instance_id":
        # The request state keeps its response; only its score is unknown.
        assert result.records.set_index("query_id")["score"].isna().tolist() == [False, True]
    elif case != "AlpacaEval annotation null":
        assert len(result.records) == 1


@pytest.mark.parametrize("kind", ["lm_eval_resps", "helm", "inspect", "alpaca_eval"])
def test_nothing_valid_left_is_one_line(tmp_path, kind):
    part = {"helm": "request_states", "alpaca_eval": "outputs"}.get(kind, "samples")
    parts = FORMATS[kind][0]()
    if kind == "lm_eval_resps":
        parts[part] = [dict(item, resps=5) for item in parts[part]]
    else:
        parts[part] = [None, None]
    with pytest.raises(RecordsError) as error:
        load(_write(tmp_path, kind, parts))
    message = str(error.value)
    assert "\n" not in message and message.startswith("nothing to import from")
    assert "2 items skipped" in message


# format -> the JSON documents beside or around the records: headers and sidecars
DOCUMENTS = {
    "lm_eval": [f"results_{STAMP}.json"],
    "eee": [f"{UUID}.json"],
    "helm": ["run/run_spec.json", "run/scenario_state.json", "run/per_instance_stats.json"],
    "inspect": ["log.json"],
    "alpaca_eval": ["results/model/model_outputs.json"],
}
DOCUMENT_CASES = [(kind, name) for kind, names in DOCUMENTS.items() for name in names]


def _document(tmp_path: Path, kind: str, name: str) -> object:
    """The valid document ``name`` as the format's writer writes it."""
    folder = tmp_path / "valid"
    _write(folder, kind, FORMATS[kind][0]())
    return json.loads((folder / name).read_text())


@pytest.mark.parametrize(("kind", "name"), DOCUMENT_CASES)
def test_mangled_header_or_sidecar_is_one_line_or_imports(tmp_path, kind, name):
    make_parts = FORMATS[kind][0]
    loader = _LOADERS[kind]
    failures = []
    for case, (description, document) in enumerate(_mangled(_document(tmp_path, kind, name), 2)):
        folder = tmp_path / str(case)
        target = _write(folder, kind, make_parts())
        (folder / name).write_text(json.dumps(document))
        try:
            frame = loader(target, _Log())
        except RecordsError as exc:
            if "\n" in str(exc):
                failures.append(f"{description}: message of several lines: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 — the point is to catch every crash
            failures.append(f"{description}: {type(exc).__name__}: {exc}")
            continue
        if not frame.empty:
            failures += [f"{description}: {breach}" for breach in _contract_breaches(frame)]
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


def _binary_parquet(path: Path, responses: list, kind: pa.DataType) -> Path:
    table = pa.table(
        {
            "model": ["a", "b", "c"],
            "task": ["t", "t", "t"],
            "query_id": ["q", "q", "q"],
            "query": pa.array(["Café?".encode()] * 3, pa.binary()),
            "response": pa.array(responses, kind),
            "score": [1.0, 0.0, 0.5],
        }
    )
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()], ids=str)
def test_binary_parquet_text_is_decoded_utf8(tmp_path, kind):
    responses = ["naïve".encode(), b"", b"b'x'"]
    path = _binary_parquet(tmp_path / "cache.parquet", responses, kind)
    records = load(path).records
    assert records["response"].tolist() == ["naïve", "", "b'x'"]
    assert records["query"].tolist() == ["Café?"] * 3


def test_binary_parquet_that_is_not_utf8_is_refused(tmp_path):
    path = _binary_parquet(tmp_path / "cache.parquet", [b"ok", b"\xff\xfe", b"\xff"], pa.binary())
    with pytest.raises(RecordsError) as error:
        validate_records(read_records(str(path)))
    message = str(error.value)
    assert "\n" not in message
    assert "column 'response'" in message and "row 2" in message and "UTF-8" in message


def _lower_is_better_file(tmp_path: Path, kind: str, scores: list[float]) -> Path:
    parts = FORMATS[kind][0]()
    for item, score in zip(parts["samples"], scores, strict=True):
        if kind == "eee":
            item["evaluation"] = {"score": score}
        else:
            item["exact_match"] = score
    writer = write_eee if kind == "eee" else write_lm_eval
    return writer(tmp_path, parts, lower_is_better=True)


LOWER_IS_BETTER_TASK = {"eee": "src.bench", "lm_eval": "bench"}


@pytest.mark.parametrize("kind", ["eee", "lm_eval"])
def test_lower_is_better_scores_are_stored_oriented_and_the_note_says_so(tmp_path, kind):
    path = _lower_is_better_file(tmp_path, kind, [0.25, 1.0])
    result = load(path)
    assert result.records["score"].tolist() == [0.75, 0.0]
    assert "lower_is_better" not in result.records.columns
    metric = " 'exact_match'" if kind == "lm_eval" else ""
    note = (
        f"{path.name}: task {LOWER_IS_BETTER_TASK[kind]!r}: lower-is-better metric{metric}; "
        "stored 1 − score so higher is better"
    )
    assert note in result.warnings
    assert not any("column" in warning for warning in result.warnings)
    with Store(str(tmp_path / "store.duckdb")) as store:
        report = store.ingest(result.records, source=path.name, notes=result.warnings)
        assert report.dropped_columns == ()
        assert sorted(store.records()["score"]) == [0.0, 0.75]
        # the flag is stored: the ingest log keeps the note with the rows' source
        logged = store.ingest_log()
        assert logged["source"].tolist() == [path.name]
        assert note in logged["notes"].iloc[0]


@pytest.mark.parametrize("kind", ["eee", "lm_eval"])
def test_lower_is_better_scores_outside_0_1_are_refused(tmp_path, kind):
    path = _lower_is_better_file(tmp_path, kind, [0.25, 3.5])
    with pytest.raises(RecordsError) as error:
        load(path)
    message = str(error.value)
    assert "\n" not in message
    assert path.name in message and repr(LOWER_IS_BETTER_TASK[kind]) in message
    assert "outside [0, 1]" in message and "3.5" in message


@pytest.mark.parametrize("kind", ["eee", "lm_eval"])
def test_higher_is_better_scores_are_kept_as_given(tmp_path, kind):
    parts = FORMATS[kind][0]()
    path = (write_eee if kind == "eee" else write_lm_eval)(tmp_path, parts)
    result = load(path)
    assert result.records["score"].tolist() == ([0.25, 0.25] if kind == "eee" else [1.0, 1.0])
    assert not any("lower-is-better" in warning for warning in result.warnings)


@pytest.mark.parametrize(
    ("column", "values"),
    [("response", pa.array([["x", "y"], ["z"]])), ("query", pa.array([{"k": "v"}, {"k": "w"}]))],
)
def test_parquet_list_or_struct_text_is_refused_not_stored_as_repr(tmp_path, column, values):
    columns = {"model": ["a", "b"], "task": ["t", "t"], "query_id": ["1", "2"]}
    columns |= {"response": ["r", "s"], "score": [1.0, 0.0]} | {column: values}
    pq.write_table(pa.table(columns), tmp_path / "cache.parquet")
    with pytest.raises(RecordsError) as error:
        load(tmp_path / "cache.parquet")
    message = str(error.value)
    assert "\n" not in message and f"column '{column}'" in message and "row 1" in message


def test_non_numeric_scores_of_several_samples_are_one_line(tmp_path):
    parts = inspect_parts()
    parts["samples"] += [inspect_sample(3), inspect_sample(4)]
    for sample, value in zip(parts["samples"][1:], ["maybe", {"a": 1}, [0.5]], strict=True):
        sample["scores"]["choice"]["value"] = value
    result = load(_write(tmp_path, "inspect", parts))
    assert result.skipped == [
        "log.json: 3 items skipped — score of scorer 'choice' is not numeric "
        "(e.g. sample 2: 'maybe')"
    ]
