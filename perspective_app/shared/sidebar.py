"""The sidebar every page shows: the active store, its size, and switching stores."""

from __future__ import annotations

from pathlib import Path

import duckdb
import streamlit as st

from perspective_app.shared.background import start_umap_warmup
from perspective_app.shared.pages import PAGES
from perspective_app.shared.store import (
    STORE_ENV,
    active_path,
    active_store,
    confine,
    is_demo,
    note_run_version,
    store_folder,
    store_summary,
    switch_store,
    url_name,
)
from perspective_app.shared.widgets import alert
from pkps_core import views
from pkps_core.demo import demo_path


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
    version = store.version
    summary = store_summary(path, version)
    note_run_version(path, version)
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
        PAGES["data"].link("Upload data")
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
            if not is_demo(path) and st.button("Back to the demo store", key="switch_demo"):
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
