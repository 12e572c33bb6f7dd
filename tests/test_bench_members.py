"""The member-by-member bench's tables (bench/predictor_members.py) on a hand-made long frame."""

import numpy as np
import pandas as pd
import pytest

from bench.predictor_members import tables


def test_each_placement_is_compared_with_the_refit_path_seed_by_seed():
    rows = []
    for seed, (refit, placed) in enumerate([(0.5, 0.7), (0.2, 0.3), (0.6, 0.5)]):
        rows += [
            {"seed": seed, "path": "refit", "member": "dkps", "spearman": refit, "cell_mae": 0.1},
            {
                "seed": seed,
                "path": "out-of-sample",
                "member": "dkps",
                "spearman": placed,
                "cell_mae": 0.05,
            },
        ]
    # a seed where the placement has no Spearman (constant predictions) is left out
    rows.append({"seed": 3, "path": "refit", "member": "dkps", "spearman": 0.9, "cell_mae": 0.1})
    rows.append(
        {"seed": 3, "path": "out-of-sample", "member": "dkps", "spearman": np.nan, "cell_mae": 0.05}
    )
    means, differences = tables(pd.DataFrame(rows))
    assert list(means.columns) == [
        "member",
        "spearman refit",
        "spearman out-of-sample",
        "cell_mae refit",
        "cell_mae out-of-sample",
    ]
    assert means.loc[0, "spearman refit"] == pytest.approx((0.5 + 0.2 + 0.6 + 0.9) / 4)
    assert means.loc[0, "cell_mae out-of-sample"] == pytest.approx(0.05)
    row = differences.iloc[0]
    assert row["placement"] == "out-of-sample" and row["n_seeds"] == 3
    assert row["spearman_difference"] == pytest.approx((0.2 + 0.1 - 0.1) / 3)
    assert row["sem"] == pytest.approx(np.std([0.2, 0.1, -0.1], ddof=1) / np.sqrt(3))
