"""The papers' evaluation protocols as seeded, reproducible sweeps over a cache.

* ``"query-efficiency"`` (PKPS Section 4, Figures 2–3): every observed cell masked to a budget
  of ``m`` queries with pairing ``rho``; levers cohort ``n`` and task coverage ``p_task``.
* ``"completion"`` (PKPS Figure 4): cells observed with probability ``p_task``, queries with
  ``p_query``; the hidden cells are the targets.
* ``"interpolation"`` / ``"extrapolation"`` ("How Benchmark Prediction from Fewer Data Misses
  the Mark"): source and target models, targets keep a shared core set; the error is the
  estimation gap, set against each target's similarity to the sources.
* ``"new-model"`` (the users' situation): dense references, new target models (whole
  families) that answered m queries per task, scored or responses-only; the cells, the
  targets' overall scores and the intervals' coverage are reported.

Modules, bottom up: :mod:`~pkps_core.protocols.masks` (preparing and masking a cache),
:mod:`~pkps_core.protocols.similarity` (model similarity),
:mod:`~pkps_core.protocols.new_model_reports` (overall scores and intervals),
:mod:`~pkps_core.protocols.reports` (the result, its summary and tests),
:mod:`~pkps_core.protocols.sweep` (the sweep driver, its :class:`SweepOptions` and the five
protocols), :mod:`~pkps_core.protocols.studies` (small study drivers). Every public name is
importable from here.

References
----------
Helm et al., "Benchmark Prediction with Sparse and Unpaired Cached Responses" (PKPS),
Section 4 and the appendix. "How Benchmark Prediction from Fewer Data Misses the Mark":
the source–target splits, the estimation gap, model similarity and the normalised gap.
"""

from pkps_core.protocols.masks import (
    NEW_MODEL_MODES,
    SPLITS,
    cell_values,
    cells_of,
    choose_cohort,
    choose_target_families,
    choose_tasks,
    cover_cells,
    full_scores,
    mask_completion,
    mask_new_model,
    mask_query_efficiency,
    mask_split,
    mask_targets,
    prepare_records,
    split_models,
    subsample_cells,
)
from pkps_core.protocols.new_model_reports import (
    format_intervals,
    interval_table,
    overall_scores,
    overall_table,
)
from pkps_core.protocols.reports import (
    COMPARATORS,
    INTERVAL_COLUMNS,
    LEVERS,
    LONG_COLUMNS,
    MAE_AVERAGING,
    MODE_COMPARATORS,
    PROTOCOLS,
    SPLIT_COLUMNS,
    ProtocolResult,
    blank_notes,
    combine_results,
    format_summary,
    mae_weights,
    make_result,
    mode_wilcoxon_tests,
    similarity_correlations,
    summary_table,
    wilcoxon_tests,
)
from pkps_core.protocols.similarity import (
    agreement_beyond_chance,
    chance_agreement,
    model_similarity,
    similarity_and_spread,
)
from pkps_core.protocols.studies import (
    estimation_gap_study,
    summarise,
    synthetic_query_efficiency,
)
from pkps_core.protocols.sweep import (
    DEFAULT_INTERVALS,
    DEFAULT_METHODS,
    PROTOCOL_DEFAULT,
    Progress,
    SweepOptions,
    completion_protocol,
    new_model_protocol,
    query_efficiency_protocol,
    run_protocol,
    run_sweep,
    split_protocol,
    sweep_options,
)

__all__ = [
    "COMPARATORS",
    "DEFAULT_INTERVALS",
    "DEFAULT_METHODS",
    "INTERVAL_COLUMNS",
    "LEVERS",
    "LONG_COLUMNS",
    "MAE_AVERAGING",
    "MODE_COMPARATORS",
    "NEW_MODEL_MODES",
    "PROTOCOLS",
    "PROTOCOL_DEFAULT",
    "SPLITS",
    "SPLIT_COLUMNS",
    "Progress",
    "ProtocolResult",
    "SweepOptions",
    "agreement_beyond_chance",
    "blank_notes",
    "cell_values",
    "cells_of",
    "chance_agreement",
    "choose_cohort",
    "choose_target_families",
    "choose_tasks",
    "combine_results",
    "completion_protocol",
    "cover_cells",
    "estimation_gap_study",
    "format_intervals",
    "format_summary",
    "full_scores",
    "interval_table",
    "make_result",
    "mae_weights",
    "mask_completion",
    "mask_new_model",
    "mask_query_efficiency",
    "mask_split",
    "mask_targets",
    "mode_wilcoxon_tests",
    "model_similarity",
    "new_model_protocol",
    "overall_scores",
    "overall_table",
    "prepare_records",
    "query_efficiency_protocol",
    "run_protocol",
    "run_sweep",
    "similarity_and_spread",
    "similarity_correlations",
    "split_models",
    "split_protocol",
    "subsample_cells",
    "summarise",
    "summary_table",
    "sweep_options",
    "synthetic_query_efficiency",
    "wilcoxon_tests",
]
