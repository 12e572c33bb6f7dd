"""``python -m bench``: the performance table of the affinity / perspective-space path.

Each (size, pairing) runs in its own process (``bench.run_one``) with BLAS threads pinned
(the affinity work runs on as many worker threads of each fit's own pool as BLAS may use,
with BLAS itself on one thread meanwhile), so peak memory is per configuration. Options:
``--sizes S,M,L,XL``, ``--pairings paired,unpaired``, ``--repeats N``, ``--no-check`` (skip
the exact-path comparisons).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pandas as pd

REPEATS = {"S": 5, "M": 5, "L": 3, "XL": 1}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--sizes", default="S,M,L,XL")
    parser.add_argument("--pairings", default="paired,unpaired")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--timeout", type=int, default=1800)
    args = parser.parse_args()
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    rows = []
    for size in args.sizes.split(","):
        for pairing in args.pairings.split(","):
            command = [
                sys.executable,
                "-m",
                "bench.run_one",
                "--size",
                size,
                "--pairing",
                pairing,
                "--repeats",
                str(args.repeats or REPEATS.get(size, 3)),
            ]
            if not args.no_check and size != "XL":
                command.append("--check-exact")
            print(f"running {size} {pairing} …", file=sys.stderr, flush=True)
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=args.timeout
            )
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                rows.append({"size": size, "pairing": pairing, "paths": "FAILED"})
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    table = pd.DataFrame(rows)
    if "paths" in table:  # one entry per bandwidth of the CV grid, in grid order
        table["paths"] = table["paths"].map(lambda p: "/".join(p) if isinstance(p, list) else p)
    print(f"BLAS threads pinned to {args.threads}; times are medians (s); peak RSS per process")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_markdown(index=False) if _has_tabulate() else table.to_string(index=False))


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
