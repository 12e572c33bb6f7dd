"""Every page control's time after the first fit, on the demo store and AlpacaEval-40.

Run from the repository root (about 15 minutes on 2 shared cores)::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/control_times.py

The stores are built under a temporary folder (the demo store from its generator, the
AlpacaEval-40 store ingested from ``../shared/data/alpaca_eval/alpaca_eval_40.parquet``;
skipped when that file is absent). Each control is timed through the functions its page
calls (``perspective_app.shared``'s cached loads and fits, run outside a Streamlit server,
and the library), in the order a user meets them: open the store, the first fit of each page, then
each control changed once from the page's defaults. A control whose work is already kept
(a cache hit) is timed as such: that is what the user waits for. Prints one Markdown table
(seconds per store) and the two ratios of issue 38's Done-when line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"


def _quiet_streamlit() -> None:
    """The cached functions run without a server: Streamlit warns once per call."""
    import streamlit.logger

    warnings.filterwarnings("ignore")
    streamlit.logger.set_log_level("error")


def build_stores(folder: Path) -> dict[str, str]:
    from pkps_core.demo import ensure_demo_store
    from pkps_core.store import Store

    stores = {"demo": str(ensure_demo_store(folder / "demo.duckdb"))}
    if ALPACA.exists():
        path = folder / "alpaca.duckdb"
        with Store(path) as store:
            store.ingest(pd.read_parquet(ALPACA), source=ALPACA.name)
        stores["AlpacaEval-40"] = str(path)
    return stores


class Timer:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def __call__(self, page: str, control: str, work: Callable[[], object], *, first=False):
        started = time.perf_counter()
        value = work()
        seconds = time.perf_counter() - started
        self.rows.append({"page": page, "control": control, "seconds": seconds, "first": first})
        print(f"  {page:<18} {control:<58} {seconds:7.2f} s", flush=True)
        return value


def time_store(path: str) -> tuple[list[dict], dict]:
    from perspective_app import shared
    from pkps_core import protocols, views
    from pkps_core.views import comparison
    from pkps_core.views.comparison_figure import comparison_figure

    timer = Timer()
    extra: dict = {}
    version = shared.open_store(path).version
    timer(
        "(store)",
        "open: records with embeddings, prepared arrays",
        lambda: (shared.load_records(path, version), shared.load_prepared(path, version)),
        first=True,
    )

    # ------------------------------------------------------------------ Data
    cells = timer(
        "Data",
        "overview: cells, summary, models",
        lambda: (shared.load_cells(path, version), shared.store_summary(path, version)),
        first=True,
    )[0]
    tasks = sorted(cells["task"].unique())
    timer(
        "Data",
        "coverage heatmap (models)",
        lambda: views.coverage_matrix(
            cells, views.model_order(cells, views.MODEL_ORDERS[1])[:80], tasks
        ),
    )
    timer("Data", "pairedness, pooled", lambda: shared.load_pairedness(path, version, None))
    timer("Data", "pairedness, one task", lambda: shared.load_pairedness(path, version, tasks[0]))

    # ------------------------------------------------------------------ Perspective space
    def both(settings):
        left = shared.fit_space(path, version, *settings)
        right = shared.fit_space(path, version, "delta", settings[1], "cv", settings[3])
        return left, right

    def draw(left, right, colour="overall score", mode=None, search=""):
        metadata = comparison.model_metadata(cells)
        compared = comparison.compare_spaces(left, right, None, None)
        comparison.agreement_sentence(
            compared.agreement,
            comparison.pairing_summary(shared.load_pairedness(path, version, None)),
            same_kernel=False,
        )
        found = comparison.search_models(left.models, search)
        return comparison_figure(
            compared,
            metadata,
            colour,
            mode=mode or comparison.MODES[0],
            highlight=found[:5],
            left_title="PKPS",
            right_title="DKPS",
        )

    started = time.perf_counter()
    left, right = timer(
        "Perspective space",
        "first fit: PKPS (CV, linear) + DKPS",
        lambda: both(("rbf", "linear", "cv", 8)),
        first=True,
    )
    extra["linear_fit"] = time.perf_counter() - started
    timer("Perspective space", "draw: comparison, sentence, figure", lambda: draw(left, right))
    metadata = comparison.model_metadata(cells)
    options = comparison.colour_options(metadata)
    timer("Perspective space", "colour by a task", lambda: draw(left, right, colour=options[-1]))
    timer(
        "Perspective space", "show: overlay", lambda: draw(left, right, mode=comparison.MODES[-1])
    )
    timer("Perspective space", "find a model", lambda: draw(left, right, search=left.models[0][:3]))
    timer(
        "Perspective space",
        "bandwidth slider (1 × median)",
        lambda: shared.fit_space(path, version, "rbf", "linear", 1.0, 8),
    )
    timer("Perspective space", "MDS dimension d = 4", lambda: both(("rbf", "linear", "cv", 4)))
    timer("Perspective space", "query kernel: delta", lambda: both(("delta", "linear", "cv", 8)))
    try:
        timer(
            "Perspective space",
            "UMAP's compile (a background thread when the app opens)",
            shared.background._warm_umap,
            first=True,
        )
        timer(
            "Perspective space",
            "2-D view: UMAP (both maps)",
            lambda: (
                shared.umap_view(path, version, "rbf", "linear", "cv", 8),
                shared.umap_view(path, version, "delta", "linear", "cv", 8),
            ),
        )
    except ImportError:
        pass
    estimate = shared.rbf_estimate(path, version, "rbf")
    extra["rbf_estimate"] = estimate["seconds"]
    started = time.perf_counter()
    timer(
        "Perspective space",
        "response kernel: rbf (page default path)",
        lambda: both(("rbf", "rbf", "cv", 8)),
    )
    extra["rbf_fit"] = time.perf_counter() - started

    # ------------------------------------------------------------------ Predictions
    def predicted(methods, targets=(), intervals=True, holdout="family", budget=4):
        # as the page does: one cached call per method on the cached context
        key = shared.PredictionKey(path, version, holdout, tuple(targets), "cv", "linear", budget)
        return [shared.predict_cells(key, method, intervals)[0] for method in methods]

    timer(
        "Predictions",
        "first Predict: sample, dkps, pkps, intervals",
        lambda: predicted(["sample", "dkps", "pkps"]),
        first=True,
    )
    started = time.perf_counter()
    timer("Predictions", "method: ensemble (intervals)", lambda: predicted(["ensemble"]))
    extra["ensemble"] = time.perf_counter() - started
    for method in ("lrmc", "irt", "rs-learn", "aipw", "length"):
        timer("Predictions", f"method: {method} (intervals)", lambda m=method: predicted([m]))
    timer(
        "Predictions",
        "intervals off (sample, dkps, pkps)",
        lambda: predicted(["sample", "dkps", "pkps"], intervals=False),
    )
    timer(
        "Predictions",
        "holdout: model",
        lambda: predicted(["sample", "dkps", "pkps"], holdout="model"),
    )
    target = sorted(cells["model"].unique())[0]
    timer(
        "Predictions",
        "one target (budget 4): sample, dkps, pkps",
        lambda: predicted(["sample", "dkps", "pkps"], targets=(target,)),
    )
    timer(
        "Predictions",
        "export: model coordinates",
        lambda: shared.prediction_coordinates(
            shared.PredictionKey(path, version, "family", (), "cv", "linear", 4)
        ),
    )

    # ------------------------------------------------------------------ New model
    timer(
        "New model",
        "fit the reference predictor",
        lambda: shared.fit_predictor(path, version, "family", lambda fraction, message: None),
        first=True,
    )
    from pkps_core.views.placed_model import placed_model_report

    def place(model):
        records = shared.load_records(path, version)
        predictor = shared.load_predictor(path, version, "family")
        return placed_model_report(predictor, records[records["model"] == model])

    models = sorted(cells["model"].unique())
    timer("New model", "a store model, placed (first read of the fit)", lambda: place(models[0]))
    timer("New model", "another store model, placed", lambda: place(models[1]))

    # ------------------------------------------------------------------ Experiments
    records = timer(
        "Experiments",
        "prepare the sweeps' records",
        lambda: protocols.prepare_records(shared.load_records(path, version)),
        first=True,
    )
    for protocol, levers in (
        ("query-efficiency", {"budgets": [1, 2, 4, 8], "rhos": [0.0], "p_tasks": [1.0]}),
        ("new-model", {"budgets": [1, 2, 4, 8, 16], "modes": ["scored", "responses-only"]}),
    ):
        heard: list[tuple[float, float]] = []  # (seconds, fraction) at each setting done
        started = time.perf_counter()

        def run(p=protocol, lv=levers, heard=heard, started=started):
            return protocols.run_protocol(
                records,
                p,
                seeds=[0],
                methods=list(protocols.DEFAULT_METHODS[p]),
                progress=lambda share, _m: heard.append((time.perf_counter() - started, share)),
                **lv,
            )

        timer("Experiments", f"Run {protocol}, defaults, one seed", run)
        total = time.perf_counter() - started
        extra[f"seed:{protocol}"] = total
        # the page's estimate after each setting: elapsed / share done (its pace)
        ratios = [(t / f) / total for t, f in heard if 0 < f < 1]
        if ratios:
            extra[f"estimate:{protocol}"] = (min(ratios), max(ratios))
    return timer.rows, extra


def one_store(name: str, path: str, out: Path) -> None:
    _quiet_streamlit()
    print(f"{name}: {path}", flush=True)
    rows, extra = time_store(path)
    out.write_text(json.dumps({"rows": rows, "extra": extra}))


def markdown(results: dict[str, dict]) -> str:
    frames = []
    for name, result in results.items():
        frame = pd.DataFrame(result["rows"]).rename(columns={"seconds": name})
        frames.append(frame.set_index(["page", "control", "first"])[name])
    table = pd.concat(frames, axis=1).reset_index()
    lines = [
        "| page | control | " + " | ".join(f"{n} (s)" for n in results) + " |",
        "|---|---|" + "---:|" * len(results),
    ]
    for page, control, first, *values in table.itertuples(index=False, name=None):
        control = f"*{control}* (first)" if first else control
        cells = ["—" if pd.isna(v) else f"{v:.2f}" for v in values]
        lines.append(f"| {page} | {control} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", nargs=2, metavar=("NAME", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.store:  # one store in its own process: caches and memory do not carry over
        one_store(*args.store, args.out)
        return
    env = {**os.environ, "PKPS_UMAP_WARMUP": "0", "STREAMLIT_LOGGER_LEVEL": "error"}
    with tempfile.TemporaryDirectory(prefix="pkps-controls-") as tmp:
        folder = Path(tmp)
        print("Building the stores…", flush=True)
        stores = build_stores(folder)
        results = {}
        for name, path in stores.items():
            out = folder / f"{name}.json"
            command = [sys.executable, __file__, "--store", name, path, "--out", str(out)]
            subprocess.run(command, check=True, env=env)
            results[name] = json.loads(out.read_text())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print()
    print(f"Commit {commit}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    print()
    print(markdown(results))
    print()
    for name, result in results.items():
        extra = result["extra"]
        line = [f"{name}: ensemble Predict {extra['ensemble']:.2f} s"]
        line.append(
            f"RBF fit {extra['rbf_fit']:.1f} s = {extra['rbf_fit'] / extra['linear_fit']:.1f}× "
            f"the linear fit ({extra['linear_fit']:.1f} s); estimate {extra['rbf_estimate']:.0f} s"
        )
        for key, value in extra.items():
            if key.startswith("seed:"):
                line.append(f"{key} {value:.1f} s")
            if key.startswith("estimate:"):
                low, high = value
                line.append(f"{key} total estimated at {low:.2f}–{high:.2f}× the real time")
        print("; ".join(line))


if __name__ == "__main__":
    main()
