"""Shadow references: every reference model re-observed at the targets' budget.

Whatever is tuned or calibrated on the references — the bandwidth, the ensemble's weights,
the intervals — must be tuned for the targets' situation, and a reference at its own dense
budget says little about a target that answered a handful of queries. So, when a
prediction run names targets, each reference model r gets ``repeats`` *shadows*: copies
that keep, on every task, as many of r's responses as one target (drawn at random) has on
that task, sampled at random without replacement, and r's scores only where that target's
cell is scored. A shadow is a target itself (it never informs anyone) and is never informed
by its own original; its truth is r's full reference. Predicting the shadows from the other
references is then a dress rehearsal of predicting the targets, at their budget and with
their kind of data (scored or responses-only), and every calibration reads it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SHADOW_REPEATS = 2
SHADOW_TAG = " [shadow {k}]"


def shadow_records(
    frame: pd.DataFrame,
    models: np.ndarray,
    tasks: np.ndarray,
    n_responses: np.ndarray,
    scored: np.ndarray,
    targets: np.ndarray,
    references: np.ndarray,
    *,
    repeats: int = SHADOW_REPEATS,
    seed: int = 0,
) -> tuple[pd.DataFrame | None, dict[str, str]]:
    """The shadows' rows, and each shadow's original.

    Parameters
    ----------
    frame : DataFrame
        The records (any extra columns, e.g. embeddings, are copied along).
    models, tasks : ndarray of str
        The grid's models and tasks (sorted, as in the prepared cache).
    n_responses : ndarray of int (n_models, n_tasks)
    scored : ndarray of bool (n_models, n_tasks)
        Cells with at least one score.
    targets : ndarray of bool (n_models,)
    references : ndarray (n_models, n_tasks)
        The references usable for training (NaN: none); models without any are not
        shadowed.
    repeats : int
        Shadows per reference model.
    seed : int

    Returns
    -------
    rows : DataFrame or None
        None when there is nothing to shadow (no targets, no references).
    origin : dict
        Shadow model name → original model name.
    """
    targets = np.asarray(targets, dtype=bool)
    shadowed = np.flatnonzero(~targets & np.isfinite(references).any(axis=1))
    target_rows = np.flatnonzero(targets & (n_responses > 0).any(axis=1))
    if repeats <= 0 or not len(shadowed) or not len(target_rows):
        return None, {}
    rng = np.random.default_rng([int(seed), 7])
    names = set(models)
    task_pos = {task: t for t, task in enumerate(tasks)}
    model_pos = {model: i for i, model in enumerate(models)}
    source = frame[frame["model"].isin(models[shadowed])]
    src_model = source["model"].map(model_pos).to_numpy()
    src_task = source["task"].map(task_pos).to_numpy()
    parts, origin = [], {}
    for k in range(1, repeats + 1):
        pattern = rng.choice(target_rows, size=len(models))  # the target each shadow mirrors
        cap = n_responses[pattern[src_model], src_task]
        keep_scores = scored[pattern[src_model], src_task]
        order = rng.permutation(len(source))
        shuffled = source.iloc[order]
        rank = shuffled.groupby(["model", "task"], sort=False).cumcount().to_numpy()
        kept = rank < cap[order]
        rows = shuffled[kept].copy()
        unscored = ~keep_scores[order][kept]
        for column in ("score", "reference_score"):
            if column in rows.columns:
                rows[column] = rows[column].astype(float)
                rows.loc[unscored, column] = np.nan
        rename = {}
        for model in models[shadowed]:
            name = f"{model}{SHADOW_TAG.format(k=k)}"
            while name in names:
                name += "'"
            names.add(name)
            rename[model] = name
            origin[name] = model
        rows["model"] = rows["model"].map(rename)
        parts.append(rows)
    rows = pd.concat(parts, ignore_index=True)
    return (rows if len(rows) else None), origin


def with_shadows_added(frame: pd.DataFrame, prepared, rows: pd.DataFrame, origin_of: dict):
    """The records and the prepared cache with the shadows' ``rows`` added, and each
    model's original (-1: not a shadow). A shadow without rows (its reference shares no
    task with the target it mirrors) is no model of the result.

    Returns
    -------
    records : DataFrame
    augmented : PreparedCache
    origin : ndarray of int (n_models,)
    """
    from pkps_core.space.prepare import append_models

    # the references stay prepared; only the shadows' rows are (what preparing the
    # concatenated records gives, tests/test_predictor.py)
    augmented = append_models(prepared, rows[list(prepared.frame.columns)])
    records = pd.concat([frame, rows[list(frame.columns)]], ignore_index=True)
    position = {model: i for i, model in enumerate(augmented.models)}
    origin = np.full(len(augmented.models), -1)
    for shadow, model in origin_of.items():
        if shadow in position:
            origin[position[shadow]] = position[model]
    return records, augmented, origin
