"""Data shaping for the app's pages, one module per page; plain pandas/numpy (no streamlit).

``from pkps_core import views; views.model_table(...)`` reaches every name; uploads live in
:mod:`pkps_core.uploads`.
"""

from pkps_core.views.data import (
    MODEL_ORDERS,
    coverage_matrix,
    error_lines,
    family_coverage,
    family_pairedness,
    model_order,
    model_table,
    paginate,
    pairedness_matrix,
    store_path_problem,
)
from pkps_core.views.experiments import new_model_tables
from pkps_core.views.predictions import (
    cell_overview,
    error_bar_frame,
    export_bytes,
    interval_table,
    mae_table,
    per_task_mae,
    prediction_export,
)
from pkps_core.views.space import (
    SpaceSummary,
    chosen_multiple,
    colour_label,
    coordinates_export,
    delta_limit_error,
    dkps_pairing_note,
    merge_selection,
    nearest_neighbours,
    plotly_text,
    scatter_frame,
    selected_models,
    similar_query_responses,
    summarize_space,
    umap_2d,
)

__all__ = [
    "MODEL_ORDERS",
    "SpaceSummary",
    "cell_overview",
    "chosen_multiple",
    "colour_label",
    "coordinates_export",
    "coverage_matrix",
    "delta_limit_error",
    "dkps_pairing_note",
    "error_bar_frame",
    "error_lines",
    "export_bytes",
    "family_coverage",
    "family_pairedness",
    "interval_table",
    "mae_table",
    "merge_selection",
    "model_order",
    "model_table",
    "nearest_neighbours",
    "new_model_tables",
    "paginate",
    "pairedness_matrix",
    "per_task_mae",
    "plotly_text",
    "prediction_export",
    "scatter_frame",
    "selected_models",
    "similar_query_responses",
    "store_path_problem",
    "summarize_space",
    "umap_2d",
]
