"""What the pages share, one module per concern; ``from perspective_app import shared``
reaches every name.

- :mod:`~perspective_app.shared.pages`: the page registry (scripts, titles, icons), declared
  once;
- :mod:`~perspective_app.shared.store`: the session's store and the settings kept in the URL;
- :mod:`~perspective_app.shared.cache`: loads and fits cached by store path, version and
  settings;
- :mod:`~perspective_app.shared.widgets`: tables with explained, sized columns; alerts;
- :mod:`~perspective_app.shared.background`: the UMAP warm-up and long fits with a progress
  estimate;
- :mod:`~perspective_app.shared.sidebar`: the store panel every page shows.

Figures are built in the library (:mod:`pkps_core.views`); pages lay them out. Widget keys
carry their page's prefix (``data_``, ``space_``, ``pred_``, ``new_model_``, ``exp_``;
``switch_`` in the sidebar).
"""

from perspective_app.shared.background import (
    UMAP_SPINNER,
    UMAP_WARMUP_ENV,
    remaining_text,
    run_in_thread,
    run_with_progress,
    start_umap_warmup,
)
from perspective_app.shared.cache import (
    INTERVAL_LEVEL,
    SLOW_FIT_SECONDS,
    PredictionKey,
    cv_space,
    fit_predictor,
    fit_space,
    load_cells,
    load_pairedness,
    load_predictor,
    load_prepared,
    load_records,
    predict_cells,
    prediction_context,
    prediction_coordinates,
    predictor_status,
    rbf_estimate,
    umap_view,
)
from perspective_app.shared.pages import (
    DATA_PAGE,
    EXPERIMENTS_PAGE,
    HOME_PAGE,
    LEADERBOARD_PAGE,
    NEW_MODEL_PAGE,
    PAGES,
    PREDICTIONS_PAGE,
    SPACE_PAGE,
    navigation,
)
from perspective_app.shared.sidebar import sidebar
from perspective_app.shared.store import (
    STORE_ENV,
    active_path,
    active_store,
    confine,
    default_store_path,
    forget_run_version,
    from_url,
    is_demo,
    keep_in_url,
    open_store,
    require_data,
    store_folder,
    store_summary,
    switch_store,
    url_name,
    url_setting,
)
from perspective_app.shared.widgets import (
    alert,
    column_tooltips,
    download_button,
    literal_block,
    progress_bar,
    table,
    table_config,
)

__all__ = [
    "DATA_PAGE",
    "EXPERIMENTS_PAGE",
    "HOME_PAGE",
    "INTERVAL_LEVEL",
    "LEADERBOARD_PAGE",
    "NEW_MODEL_PAGE",
    "PAGES",
    "PREDICTIONS_PAGE",
    "SLOW_FIT_SECONDS",
    "SPACE_PAGE",
    "STORE_ENV",
    "UMAP_SPINNER",
    "UMAP_WARMUP_ENV",
    "PredictionKey",
    "active_path",
    "active_store",
    "alert",
    "column_tooltips",
    "confine",
    "cv_space",
    "default_store_path",
    "download_button",
    "fit_predictor",
    "fit_space",
    "forget_run_version",
    "from_url",
    "is_demo",
    "keep_in_url",
    "literal_block",
    "progress_bar",
    "load_cells",
    "load_pairedness",
    "load_predictor",
    "load_prepared",
    "load_records",
    "navigation",
    "open_store",
    "predict_cells",
    "prediction_context",
    "prediction_coordinates",
    "predictor_status",
    "rbf_estimate",
    "remaining_text",
    "require_data",
    "run_in_thread",
    "run_with_progress",
    "sidebar",
    "start_umap_warmup",
    "store_folder",
    "store_summary",
    "switch_store",
    "table",
    "table_config",
    "umap_view",
    "url_name",
    "url_setting",
]
