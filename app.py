"""Perspective Explorer — the Streamlit entrypoint: page config, shared sidebar, navigation.

The pages are in ``app_pages/``, what they share in ``app_shared.py``. The active store is
the embedded demo store (``demo.duckdb`` in :func:`pkps_core.demo.data_dir`, built on first
run) unless the ``PKPS_STORE`` environment variable names another ``.duckdb`` file; the
sidebar switches stores at run time.
"""

import streamlit as st

import app_shared as shared

st.set_page_config(page_title="Perspective Explorer", page_icon="🧭", layout="wide")

pages = [
    st.Page(shared.HOME_PAGE, title="Home", icon="🧭", default=True),
    st.Page(shared.DATA_PAGE, title="Data", icon="📥"),
    st.Page(shared.SPACE_PAGE, title="Perspective space", icon="🌌"),
    st.Page(shared.PREDICTIONS_PAGE, title="Predictions", icon="🎯"),
    st.Page(shared.EXPERIMENTS_PAGE, title="Experiments", icon="🧪"),
]
navigation = st.navigation(pages)
shared.sidebar()
navigation.run()
