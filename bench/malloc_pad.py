"""What glibc's ``malloc`` keeping freed memory (``pkps_core.space.runtime.keep_freed_memory``)
changes: time, page faults and peak memory of the same work with and without it.

Run from the repository root (about four minutes)::

    PYTHONPATH=. .venv/bin/python bench/malloc_pad.py [--rounds 3] [--pads 0,256]

Each case runs in a fresh process per round and pad (``PKPS_MALLOC_PAD_MB``; 0 leaves
``malloc`` as glibc sets it), with BLAS on one thread; the pads alternate within a round,
so a machine that slows down meanwhile slows both. Cases: the synthetic study of
``tests/test_claims.py`` on four seeds (one thread), and the demo store's reference
predictor fit and its leaderboard (the fit's two threads). Prints one Markdown table of
medians over the rounds: wall and CPU seconds (user, system), minor page faults and peak
resident memory (``VmHWM``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "synthetic study (claims, 4 seeds, 1 thread)": "study",
    "demo store: predictor fit + leaderboard (2 threads)": "board",
}


def _case(name: str) -> None:
    """In the child: the program's start (as ``pkps`` does), then the case's work."""
    from pkps_core.space.runtime import keep_freed_memory, peak_rss_bytes

    pad = keep_freed_memory()
    if name == "study":
        from pkps_core.protocols import synthetic_query_efficiency

        synthetic_query_efficiency(budgets=(1, 2, 4), rhos=(0.0, 0.5, 1.0), seeds=range(4))
    else:
        import tempfile

        from pkps_core.demo import ensure_demo_store
        from pkps_core.leaderboard import build_leaderboard
        from pkps_core.predictor import stored_predictor
        from pkps_core.store import Store

        with tempfile.TemporaryDirectory() as folder:
            with Store(ensure_demo_store(Path(folder) / "demo.duckdb")) as store:
                build_leaderboard(store.records(), stored_predictor(store))
    print(json.dumps({"pad": pad, "peak": peak_rss_bytes()}))


def _run(case: str, pad: int) -> dict:
    env = os.environ | {
        "PKPS_MALLOC_PAD_MB": str(pad),
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--child", case],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "wall": wall,
        "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime,
        "faults": after.ru_minflt - before.ru_minflt,
        "peak": child["peak"] / 2**20,
        "set": child["pad"] >> 20,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pads", default="0,256", help="megabytes, comma-separated")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _case(args.child)
        return
    pads = [int(p) for p in args.pads.split(",")]
    runs: dict[tuple[str, int], list[dict]] = {}
    for round_ in range(args.rounds):
        for label, case in CASES.items():
            order = pads if round_ % 2 == 0 else pads[::-1]
            for pad in order:
                runs.setdefault((label, pad), []).append(_run(case, pad))
                print(f"round {round_ + 1}: {label}, pad {pad} MB done", file=sys.stderr)
    print("| case | pad MB (set) | wall s | user s | system s | minor faults | peak MB |")
    print("|---|---|---|---|---|---|---|")
    for (label, pad), rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"| {label} | {pad} ({med['set']:.0f}) | {med['wall']:.2f} | {med['user']:.2f} | "
            f"{med['sys']:.2f} | {med['faults']:,.0f} | {med['peak']:.0f} |"
        )


if __name__ == "__main__":
    main()
