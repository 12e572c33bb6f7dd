"""bench/synthetic_table.py (docs/results/synthetic.md): its layout and one seed's claims."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.synthetic_table import GRID, METHODS, markdown, table


def test_markdown_puts_each_method_in_its_column_in_grid_order():
    rows = [
        {"budget": m, "rho": rho, "method": name, "mean": 0.1 * (k + 1) + m, "sem": 0.001}
        for m, rho in reversed(GRID)
        for k, name in enumerate(METHODS)
    ]
    lines = markdown(pd.DataFrame(rows)).splitlines()
    assert lines[0] == "| m | ρ | sample | DKPS | PKPS |"
    body = lines[2:]
    assert [tuple(line.split(" | ")[:2]) for line in body] == [
        (f"| {m}", f"{rho:g}") for m, rho in sorted(GRID)
    ]
    first = body[0].strip("| ").split(" | ")
    assert first[2:] == ["1.100 ± 0.001", "1.200 ± 0.001", "1.300 ± 0.001"]


@pytest.mark.slow
def test_one_seed_reproduces_the_papers_ordering_at_rho_0():
    summary = table(1).set_index(["budget", "rho", "method"])["mean"]
    assert len(summary) == len(GRID) * len(METHODS)
    # Figure 2a: at rho = 0 and m = 1 PKPS beats DKPS (no shared query) and the sample score
    assert summary[(1, 0.0, "pkps")] < 0.7 * summary[(1, 0.0, "dkps")]
    assert summary[(1, 0.0, "pkps")] < summary[(1, 0.0, "sample")]
    # one shared query (rho = 0.25 at m = 4) brings DKPS back to PKPS's level
    assert abs(summary[(4, 0.25, "dkps")] - summary[(4, 0.25, "pkps")]) < 0.03
