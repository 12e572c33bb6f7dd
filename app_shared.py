"""What every page shares: page paths, the active store, cached loads and fits, the sidebar.

Caches are keyed by their inputs: the store path and its ``version`` (bumped by every
ingest), and the kernel / bandwidth / method settings. Large read-only objects (records
with embeddings, prepared caches, prediction contexts) live in ``st.cache_resource`` so
they are not copied on every read; small results (summaries, predictions) in
``st.cache_data``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import streamlit as st

from pkps_core import views
from pkps_core.demo import data_dir, demo_path, ensure_demo_store
from pkps_core.predict import PredictionContext, build_context
from pkps_core.protocols.masks import mask_targets
from pkps_core.records import cell_table
from pkps_core.space import PerspectiveSpace, PreparedCache, prepare_cache
from pkps_core.store import Store
from pkps_core.views.columns import column_help
from pkps_core.views.widths import column_widths

STORE_ENV = "PKPS_STORE"
# Page scripts, relative to app.py (st.Page, st.page_link and AppTest.switch_page take these).
HOME_PAGE = "app_pages/home.py"
DATA_PAGE = "app_pages/data.py"
SPACE_PAGE = "app_pages/space.py"
PREDICTIONS_PAGE = "app_pages/predictions.py"
EXPERIMENTS_PAGE = "app_pages/experiments.py"


def column_tooltips(frame) -> dict:
    """``column_config`` giving each of ``frame``'s columns its meaning as a tooltip."""
    data = frame.data if isinstance(getattr(frame, "data", None), pd.DataFrame) else frame  # Styler
    columns = list(getattr(data, "columns", []))
    index_names = [n for n in getattr(getattr(data, "index", None), "names", []) if n]
    names = [*columns, *index_names]
    return {name: st.column_config.Column(help=text) for name, text in column_help(names).items()}


def table_config(frame, column_config: dict | None = None, *, hide_index=None) -> dict:
    """``column_config`` for ``frame``: every column's meaning as its header tooltip
    (:func:`pkps_core.views.columns.column_help`) and a pixel width that fits its header
    and its longest cell (:func:`pkps_core.views.widths.column_widths`, capped for long
    free text); ``column_config`` entries win, and keep a width they give."""
    config = column_tooltips(frame)
    for name, given in (column_config or {}).items():
        if isinstance(given, str):
            given = st.column_config.Column(given)
        if isinstance(given, dict) and not given.get("help") and name in config:
            given = {**given, "help": config[name]["help"]}
        config[name] = given
    for name, width in column_widths(frame, config, hide_index=hide_index).items():
        config[name] = {**(config.get(name) or {}), "width": width}
    return config


def table(frame, *, column_config: dict | None = None, **kwargs):
    """``st.dataframe`` with :func:`table_config`'s tooltips and widths (no header or
    cell cut at the column's edge, bar capped long text)."""
    from pandas.io.formats.style import Styler

    data = frame.data if isinstance(frame, Styler) else frame  # a Styler draws its frame
    config = table_config(data, column_config, hide_index=kwargs.get("hide_index"))
    return st.dataframe(frame, column_config=config, **kwargs)


def default_store_path() -> str:
    """``$PKPS_STORE`` if set, else the embedded demo store."""
    configured = os.environ.get(STORE_ENV, "").strip()
    return str(Path(configured).expanduser().resolve()) if configured else str(demo_path())


def is_demo(path: str) -> bool:
    return Path(path).resolve() == demo_path().resolve()


@st.cache_resource(show_spinner="Opening the store…")
def open_store(path: str) -> Store:
    """One :class:`Store` per store file, shared by every session; it opens the file for
    each operation only, so other processes (``python -m pkps_core ingest``) can use the
    store while the app runs."""
    if is_demo(path):
        ensure_demo_store(path)
    return Store(path, hold=False)


def store_folder() -> Path:
    """The folder the app opens and creates stores in (``$PKPS_DATA_DIR``, default
    ``data/``); the store named at launch (``$PKPS_STORE``) is allowed besides."""
    return data_dir()


def confine(name: str) -> tuple[Path | None, str | None]:
    """:func:`views.confined_store_path` in the app's store folder."""
    return views.confined_store_path(name, store_folder(), allowed=[default_store_path()])


def _store_from_url() -> str | None:
    """The store the URL names (``?store=``), if it is an existing store inside the store
    folder; else None, with the reason kept for the sidebar (nothing is created)."""
    name = st.query_params.get("store")
    if not name:
        return None
    path, problem = confine(name)
    if problem is None and not path.is_file():
        problem = f"There is no store {name!r} in the store folder {store_folder()}."
    if problem is not None:
        st.session_state["url_store_problem"] = f"{problem}"
        return None
    return str(path)


def url_name(path: str) -> str:
    """How a store is named in the URL: relative to the store folder where it is inside."""
    resolved = Path(path).resolve()
    folder = store_folder().resolve()
    return str(resolved.relative_to(folder)) if resolved.is_relative_to(folder) else str(resolved)


def active_path() -> str:
    """The session's store: the URL's, else the default; kept in the URL, so a reload, a
    second tab or a shared link opens the same store."""
    if "store_path" not in st.session_state:
        st.session_state["store_path"] = _store_from_url() or default_store_path()
    path = st.session_state["store_path"]
    st.query_params["store"] = url_name(path)
    return path


def from_url(key: str, options, *, many: bool = False):
    """The URL's value of ``key`` among ``options`` (matched by its text); with ``many``
    the list of its values that are (an empty ``?key=`` is an empty list). None when the
    URL has no ``key``, or (without ``many``) no value among ``options``."""
    if key not in st.query_params:
        return None
    wanted = [v for v in st.query_params.get_all(key) if v != ""]
    found = [next((o for o in options if str(o) == v), None) for v in wanted]
    found = list(dict.fromkeys(o for o in found if o is not None))
    if many:
        return found
    return found[0] if found else None


def url_setting(key: str, options, *, many: bool = False) -> None:
    """Before a keyed widget: take its value from the URL on a session's first run (when it
    is one of ``options``; with ``many``, the values that are). After it,
    :func:`keep_in_url` writes the value back."""
    value = from_url(key, options, many=many)
    if key not in st.session_state and value is not None:
        st.session_state[key] = value


def keep_in_url(*keys: str) -> None:
    """Write the widgets' values to the URL (a reload shows the same view); a list as a
    repeated parameter (``?key=a&key=b``; empty: ``?key=``)."""
    for key in keys:
        if key in st.session_state:
            value = st.session_state[key]
            if isinstance(value, list | tuple):
                st.query_params[key] = [str(v) for v in value] or [""]
            else:
                st.query_params[key] = str(value)


def active_store() -> Store:
    return open_store(active_path())


def switch_store(path: str) -> None:
    """Make ``path`` the active store (opening it now, so errors surface here)."""
    open_store(path)
    st.session_state["store_path"] = path
    st.query_params["store"] = url_name(path)


@st.cache_resource(max_entries=4, show_spinner="Loading the responses and their embeddings…")
def load_records(path: str, version: int) -> pd.DataFrame:
    """The store's records with embeddings (texts are embedded once, on first use)."""
    return open_store(path).records()


def predictor_status(path: str, holdout: str) -> str:
    """ "current", "stale" or "none": the store's fitted reference predictor (``fit``) for
    the new-model page's settings."""
    from pkps_core.predictor import FIT_KIND, ReferencePredictor
    from pkps_core.store.fits import fit_key, fit_status

    key = fit_key(FIT_KIND, ReferencePredictor(holdout=holdout).settings())
    return fit_status(open_store(path), key)


@st.cache_resource(max_entries=4, show_spinner="Reading the fitted reference predictor…")
def load_predictor(path: str, version: int, holdout: str):
    """The store's fitted reference predictor at this store version (read, never fitted
    here: :func:`fit_predictor` fits it, with progress)."""
    from pkps_core.predictor import stored_predictor

    return stored_predictor(
        open_store(path), fit="never", records=load_records(path, version), holdout=holdout
    )


def fit_predictor(path: str, version: int, holdout: str, progress) -> None:
    """Fit the store's reference predictor and keep it in the store (``progress(fraction,
    message)``); the next :func:`load_predictor` reads it."""
    from pkps_core.predictor import stored_predictor

    stored_predictor(
        open_store(path),
        fit="always",
        records=load_records(path, version),
        holdout=holdout,
        progress=progress,
    )
    load_predictor.clear()


@st.cache_resource(max_entries=4, show_spinner="Preparing the kernel arrays…")
def load_prepared(path: str, version: int) -> PreparedCache:
    return prepare_cache(load_records(path, version), validated=True)


@st.cache_data(max_entries=8, show_spinner="Reading the store…")
def load_cells(path: str, version: int) -> pd.DataFrame:
    """Per (model, task) cell: family, responses, sample score, reference."""
    return cell_table(open_store(path).records(with_embeddings=False))


@st.cache_data(max_entries=8, show_spinner=False)
def store_summary(path: str, version: int) -> dict[str, int]:
    return open_store(path).summary()


@st.cache_data(max_entries=16, show_spinner="Counting shared queries…")
def load_pairedness(path: str, version: int, task: str | None) -> pd.DataFrame:
    return open_store(path).pairedness(task)


@st.cache_data(max_entries=32, show_spinner="Fitting the perspective space…")
def fit_space(
    path: str,
    version: int,
    query_kernel: str,
    response_kernel: str,
    bandwidth: str | float,
    n_components: int,
) -> views.SpaceSummary:
    """Fit PKPS (``"rbf"``) or DKPS (``"delta"``).

    ``bandwidth`` is ``"cv"`` or a multiple of the median query distance (0 = delta
    limit); the median comes from the cross-validated fit of the same store.
    """
    if query_kernel == "rbf":
        # one cross-validated fit keeps the kernel sums of every grid bandwidth, so moving
        # the slider between grid points costs an MDS, not a refit
        space = cv_space(path, version, response_kernel, n_components)
        if bandwidth != "cv":
            space = space.select_bandwidth(float(bandwidth) * space.median_query_distance_)
        return views.summarize_space(space)
    params = {
        "query_kernel": query_kernel,
        "response_kernel": response_kernel,
        "n_components": int(n_components),
    }
    space = PerspectiveSpace(**params).fit(load_prepared(path, version))
    return views.summarize_space(space)


@st.cache_resource(max_entries=4, show_spinner="Cross-validating the query bandwidth…")
def cv_space(path: str, version: int, response_kernel: str, n_components: int) -> PerspectiveSpace:
    """The cross-validated PKPS fit (with every grid bandwidth's kernel sums)."""
    params = {
        "query_kernel": "rbf",
        "response_kernel": response_kernel,
        "n_components": int(n_components),
    }
    return PerspectiveSpace(**params).fit(load_prepared(path, version))


UMAP_WARMUP_ENV = "PKPS_UMAP_WARMUP"
UMAP_SPINNER = (
    "Running UMAP on the coordinates… The first UMAP in a server compiles its numerical "
    "code (about 25 s; the app starts this in the background when it opens); later runs "
    "take about a second."
)
_umap_warmup: dict[str, threading.Thread] = {}
_warmup_lock = threading.Lock()


def start_umap_warmup() -> threading.Thread | None:
    """Compile UMAP's numba code once per server, in a background thread, so the first
    UMAP view does not wait ~25 s for it. Off when ``$PKPS_UMAP_WARMUP`` is ``0``."""
    if os.environ.get(UMAP_WARMUP_ENV, "1").strip() == "0":
        return None
    with _warmup_lock:
        if "umap" not in _umap_warmup:
            thread = threading.Thread(target=_warm_umap, name="umap-warmup", daemon=True)
            _umap_warmup["umap"] = thread
            thread.start()
    return _umap_warmup["umap"]


def _warm_umap() -> None:
    try:
        views.umap_2d(np.random.default_rng(0).normal(size=(24, 4)))
    except Exception:  # noqa: BLE001 - optional package absent or broken: the view says so
        pass


@st.cache_data(max_entries=16, show_spinner=UMAP_SPINNER)
def umap_view(
    path: str,
    version: int,
    query_kernel: str,
    response_kernel: str,
    bandwidth: str | float,
    n_components: int,
):
    summary = fit_space(path, version, query_kernel, response_kernel, bandwidth, n_components)
    dims = [c for c in summary.coordinates.columns if c.startswith("dim_")]
    return views.umap_2d(summary.coordinates[dims].to_numpy())


# A fit estimated to take longer than this asks first (RBF response kernel on a big cache).
SLOW_FIT_SECONDS = 20.0
_slow_fits_done: set[tuple] = set()


@st.cache_data(max_entries=16, show_spinner="Estimating the cost of the RBF response kernel…")
def rbf_estimate(path: str, version: int, query_kernel: str) -> dict[str, float]:
    """Responses, passes and estimated seconds of the Perspective page's RBF fits."""
    prepared = load_prepared(path, version)
    n_responses = prepared.layout.n_responses
    passes = views.rbf_passes(query_kernel)
    seconds = views.rbf_fit_seconds(
        n_responses, len(prepared.models), prepared.response_vectors.shape[1] + 1, passes
    )
    return {"responses": n_responses, "passes": passes, "seconds": seconds}


def slow_fit_done(key: tuple) -> bool:
    """Whether this server already ran the slow fit ``key`` (so its result is cached)."""
    return key in _slow_fits_done


def run_with_progress(work, seconds: float, label: str, key: tuple):
    """Run ``work()`` in a thread while a bar shows the time elapsed against the estimate.

    The bar is time-based (the kernel sums report no progress of their own), labelled as
    an estimate; ``work``'s exception is raised here.
    """
    from streamlit.runtime.scriptrunner import add_script_run_ctx

    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the script thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="slow-fit", daemon=True)
    add_script_run_ctx(thread)
    bar = st.progress(0.0, text=label)
    start = time.monotonic()
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
        elapsed = time.monotonic() - start
        bar.progress(
            min(0.99, elapsed / max(seconds, 1e-9)),
            text=f"{label} {elapsed:.0f} s of an estimated {seconds:.0f} s",
        )
    bar.empty()
    if "error" in outcome:
        raise outcome["error"]
    _slow_fits_done.add(key)
    return outcome["value"]


@st.cache_resource(max_entries=2, show_spinner=False)
def prediction_context(
    path: str,
    version: int,
    holdout: str,
    targets: tuple[str, ...],
    bandwidth: str,
    response_kernel: str,
    budget: int,
) -> PredictionContext:
    """The Predictions page's context: targets keep ``budget`` responses per task and are
    judged against their full data (:func:`pkps_core.protocols.masks.mask_targets`)."""
    records = load_records(path, version)
    if targets:
        records = mask_targets(records, targets, budget, seed=0)
    return build_context(
        records,
        holdout=holdout,
        targets=list(targets) or None,
        space_params={"query_bandwidth": bandwidth, "response_kernel": response_kernel},
    )


@st.cache_data(max_entries=8, show_spinner="Fitting the spaces for the coordinates…")
def prediction_coordinates(
    path: str,
    version: int,
    holdout: str,
    targets: tuple[str, ...],
    bandwidth: str,
    response_kernel: str,
    budget: int,
) -> pd.DataFrame:
    context = prediction_context(
        path, version, holdout, targets, bandwidth, response_kernel, budget
    )
    summaries = {
        "pkps": views.summarize_space(context.pkps),
        "dkps": views.summarize_space(context.dkps),
    }
    export = views.coordinates_export(summaries)
    # the references' shadows (calibration copies observed like the targets) are not models
    return export[~export["model"].isin(context.models[context.shadows])].reset_index(drop=True)


def alert(kind: str, headline: str, detail: str | None = None) -> None:
    """An alert with fixed wording; user-derived text (file and model names, messages
    quoting the input) goes below it through ``st.text``, which does not interpret
    Markdown."""
    getattr(st, kind)(headline)
    if detail:
        st.text(detail)


def require_data() -> tuple[str, int]:
    """The active store's (path, version); stops the page with a pointer if it is empty."""
    path = active_path()
    summary = store_summary(path, active_store().version)
    if summary["responses"] == 0:
        st.info("This store holds no responses yet. Upload a cache on the Data page.")
        st.page_link(DATA_PAGE, label="Go to Data", icon=":material/upload_file:")
        st.stop()
    return path, summary["version"]


def sidebar() -> None:
    """The active store, its size, and switching to another store file (and, once per
    server, the UMAP warm-up: the sidebar is drawn on every page at app start)."""
    start_umap_warmup()
    path = active_path()
    try:
        store = active_store()
    except duckdb.Error as exc:
        with st.sidebar:
            alert("error", "Cannot open the store; back to the demo store.", f"{path}: {exc}")
        st.session_state["store_path"] = str(demo_path())
        return
    summary = store_summary(path, store.version)
    with st.sidebar:
        refused = st.session_state.pop("url_store_problem", None)
        if refused:
            alert("error", "The link's store was not opened.", refused)
        st.subheader("Store")
        label = "demo (synthetic)" if is_demo(path) else Path(path).name
        st.text(label)
        st.text(path)
        st.caption(
            f"{summary['models']} models · {summary['tasks']} tasks · "
            f"{summary['responses']:,} responses · version {summary['version']}"
        )
        st.page_link(DATA_PAGE, label="Upload data", icon=":material/upload_file:")
        with st.expander("Switch store"):
            here = views.stores_in(store_folder())
            if here:
                picked = st.selectbox(
                    f"Stores in {store_folder()}", here, index=None, key="switch_pick"
                )
                if picked and st.button("Open this store", key="switch_pick_open"):
                    _open_from_sidebar(picked, False)
            with st.form("switch_store", border=False):
                target = st.text_input(
                    "Store file (.duckdb)",
                    value=url_name(path),
                    help=f"A store in the store folder {store_folder()} (a name, or a path "
                    "inside it), or a new one to create there (tick the box below). Start "
                    f"the app with {STORE_ENV}=… to choose the default.",
                )
                create = st.checkbox(
                    "Create a new store if the file does not exist",
                    value=False,
                    key="switch_create",
                    help="Off: a path with no store file is refused rather than silently "
                    "creating an empty store. A missing folder is always refused.",
                )
                opened = st.form_submit_button("Open")
            if opened:
                _open_from_sidebar(target, create)
            if not is_demo(path) and st.button("Back to the demo store"):
                switch_store(str(demo_path()))
                st.rerun()


def _open_from_sidebar(target: str, create: bool) -> None:
    candidate, problem = confine(target)
    if problem is None:
        problem = views.store_path_problem(str(candidate), create=create)
    if problem:
        alert("error", "Cannot open that store.", problem)
        return
    try:
        switch_store(str(candidate))
    except (duckdb.Error, OSError) as exc:
        alert("error", "Cannot open that store.", f"{candidate}: {exc}")
        return
    st.rerun()
