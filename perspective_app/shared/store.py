"""The session's store: which file is active, its place in the URL, and the settings the URL
carries (a reload, a second tab or a shared link shows the same view)."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from perspective_app.shared.pages import PAGES
from pkps_core import views
from pkps_core.demo import data_dir, demo_path, ensure_demo_store
from pkps_core.store import Store

STORE_ENV = "PKPS_STORE"


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


@st.cache_data(max_entries=8, show_spinner=False)
def store_summary(path: str, version: int) -> dict[str, int]:
    return open_store(path).summary()


# The (path, version) the sidebar read in this script run: the page's ``require_data``
# takes it instead of opening the store file a second time (a DuckDB instance costs
# 25-40 ms here, on every click). Popped by the page and at the run's end, so it never
# outlives its run.
RUN_VERSION_KEY = "_store_version_this_run"


def note_run_version(path: str, version: int) -> None:
    st.session_state[RUN_VERSION_KEY] = (path, version)


def forget_run_version() -> None:
    """At the end of every script run (a page that never asks leaves none behind)."""
    st.session_state.pop(RUN_VERSION_KEY, None)


def run_version(path: str) -> int:
    """The store's version as read earlier in this script run, or read now."""
    seen = st.session_state.pop(RUN_VERSION_KEY, None)
    if seen is not None and seen[0] == path:
        return seen[1]
    return active_store().version


def require_data() -> tuple[str, int]:
    """The active store's (path, version); stops the page with a pointer if it is empty."""
    path = active_path()
    summary = store_summary(path, run_version(path))
    if summary["responses"] == 0:
        st.info("This store holds no responses yet. Upload a cache on the Data page.")
        PAGES["data"].link("Go to Data")
        st.stop()
    return path, summary["version"]
