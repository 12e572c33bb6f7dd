"""What each column of the app's tables means: the tooltip of every table header.

The app shows every table through ``perspective_app.shared.table``, which gives each column
the help text :func:`column_help` returns; ``tests/test_app_tables.py`` renders every page and fails
on a column without one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The header of a budget's column in the new-model protocol's tables (methods as rows).
BUDGET_HEADER = "m = {}"
_BUDGET_HEADER = re.compile(r"m = (\d+)")

METHOD_HELP = {
    "mean": "references' mean score on the task: the floor every method should beat",
    "sample": "the cell's own sample score: the mean of its observed scores",
    "irt": "1-parameter IRT (Rasch) fitted on fully observed blocks, binary tasks only",
    "lrmc": "low-rank matrix completion of the model × task score matrix (BenchPress)",
    "rs-learn": "Random-Sampling-Learn: regression of full scores on sample scores",
    "aipw": "augmented inverse-probability weighting: sample score corrected by a model",
    "dkps": "KNN in the DKPS space (delta query kernel: only shared queries compare)",
    "pkps": "KNN in the PKPS space (RBF query kernel: similar queries compare)",
    "length": "references' scores against how much longer the model answers, query by query",
    "pkps-length": "PKPS corrected for how much longer the model answers than its neighbours",
    "ensemble": "the methods combined with weights validated at the target's budget",
}

COLUMN_HELP = {
    # cells and predictions
    "model": "model id as stored",
    "task": "task (benchmark) name as stored",
    "family": "model family: held out together under family holdout",
    "method": "prediction method (see the methods list on the Predictions page)",
    "prediction": "predicted full-task score of the cell",
    "sample_score": "mean observed score of the cell (empty: no scored responses)",
    "mean_sample_score": "mean over the model's tasks of its sample scores",
    "reference_score": "the cell's trusted full-task score (or its sample score where the "
    "input gives none)",
    "mean_reference": "mean over the model's tasks of its reference scores",
    "n_responses": "responses observed in the cell",
    "responses": "responses stored for the model",
    "tasks": "tasks the model has responses on",
    "note": "why a prediction is missing or how it was made",
    "cells without an error": "cells of this method with no error to average (no prediction "
    "or no true score), of all its cells",
    "why": "why those cells have no error, as the method or the sweep said",
    "lower": "lower end of the 90 % prediction interval",
    "upper": "upper end of the 90 % prediction interval",
    "width": "interval width: upper − lower",
    "mean_width": "mean interval width over the cells with an interval",
    "extrapolation": "warned: the cell lies beyond the references (see the reason)",
    "extrapolation_reason": "which extrapolation checks fired",
    "warned_by": "the methods whose prediction for this cell an extrapolation check warned",
    "extrapolation_cells": "cells with an extrapolation warning",
    "MAE": "mean absolute error against the reference score",
    "cells": "cells counted",
    "cells_predicted": "cells with a prediction",
    "cells_scored": "cells with a reference score to compare with",
    "cells_with_interval": "cells with a prediction interval",
    "coverage": "share of cells whose reference lies inside the interval",
    "rank": "rank by interval width or score (1 = first)",
    "task_queries": "queries the task has in the store",
    "expected_gain": "interval width one more evaluated query is expected to remove",
    "filled_tasks": "tasks the ensemble predicts for the model",
    "members": "methods the ensemble combines for this pattern",
    "pattern": "which members apply to the cell (the ensemble weighs each pattern apart)",
    "n_calibration": "shadow cells the weights were validated on",
    "overall": "query-weighted mean over tasks",
    "role": "reference or the new model",
    "score": "per-response score",
    # neighbours and responses
    "distance": "distance in the perspective space (smaller: more alike)",
    "similarity": "cosine similarity of the query embeddings",
    "neighbour": "a nearby reference model",
    "neighbour_query": "the neighbour's query closest to the model's own",
    "neighbour_response": "the neighbour's response to that query",
    "neighbour_score": "the neighbour's score on that response",
    "neighbour_task": "task of that query",
    "query": "query text",
    "query_id": "query id within the task",
    "response": "response text",
    # data page
    "added": "rows new to the store",
    "replaced": "rows that changed a stored (model, task, query_id)",
    "unchanged": "rows identical to what was stored",
    "source": "file (or upload) the rows came from",
    "ingested_at": "when the import finished (UTC)",
    "notes": "the importer's notes, e.g. lower-is-better scores stored as 1 − score",
    "derived": "how the family came about: prefix rule, from the data, or edited here",
    "suggested": "a family from the model name's stem, to apply with one click",
    "file": "uploaded file",
    "rows": "rows read from the file",
    "format": "importer that read the file",
    # space page
    "bandwidth": "query-kernel bandwidth σ",
    "multiple_of_median": "σ as a multiple of the median query distance (0: delta limit)",
    "cv_error": "leave-one-model-out KNN MAE at this bandwidth",
    "chosen": "the bandwidth cross-validation chose",
    # experiments
    "budget": "responses per task given to each masked model (m)",
    "rho": "pairing: share of queries models have in common",
    "p_task": "share of tasks a masked model is observed on",
    "p_query": "share of queries observed per task",
    "cohort": "models that are masked together",
    "n_tasks": "tasks used",
    "core_set": "queries per task in the core set",
    "mode": "new-model protocol: targets scored, or responses only",
    "seed": "random seed",
    "comparator": "the method compared against",
    "mean_diff": "mean per-task error difference (method − comparator; < 0: method better)",
    "frac_cells_better": "share of cells where the method's error is smaller",
    "tasks_better": "tasks where the method's mean error is smaller",
    "tasks_tested": "tasks in the test",
    "n_cells": "cells in the test",
    "statistic": "Wilcoxon signed-rank statistic",
    "p_value": "two-sided p-value of the Wilcoxon test",
    "pearson_r": "Pearson correlation",
    "spearman": "Spearman rank correlation of the targets' overall scores",
}


def column_help(columns: Iterable[object]) -> dict[str, str]:
    """The help text of each column that has one (method names and budget columns,
    :data:`BUDGET_HEADER`, included)."""
    known = {**COLUMN_HELP, **METHOD_HELP}
    out = {}
    for column in map(str, columns):
        if column in known:
            out[column] = known[column]
        elif budget := _BUDGET_HEADER.fullmatch(column):
            out[column] = f"budget m = {budget[1]}: {COLUMN_HELP['budget']}"
    return out


def undocumented(columns: Iterable[object]) -> list[str]:
    """Columns :func:`column_help` has nothing for."""
    helped = column_help(columns)
    return [str(c) for c in columns if str(c) not in helped]
