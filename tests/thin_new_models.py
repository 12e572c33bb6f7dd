"""The predictor tests' split: references keep every response, a few models answer thinly."""

import pandas as pd

from pkps_core.synthetic import make_synthetic


def thin_new_models(
    positions: list[int], per_task: int, seed: int, **synthetic
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """A synthetic cache (:func:`make_synthetic` with ``synthetic``) whose models at
    ``positions`` (of the sorted names) are new, each keeping ``per_task`` random responses
    per task (``seed``); the rest are references.

    Returns (every record, the references', the new models' kept records, their names)."""
    records = make_synthetic(**synthetic).records
    names = sorted(records["model"].unique())
    new_models = [names[p] for p in positions]
    references = records[~records["model"].isin(new_models)]
    thin = (
        records[records["model"].isin(new_models)]
        .groupby(["model", "task"])
        .sample(per_task, random_state=seed)
    )
    return records, references, thin, new_models
