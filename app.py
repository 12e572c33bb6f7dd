"""Perspective Explorer — the Streamlit entrypoint: page config, shared sidebar, navigation.

The active store is the embedded demo store (``data/demo.duckdb``, built on first run)
unless the ``PKPS_STORE`` environment variable names another ``.duckdb`` file; the
sidebar switches stores at run time.
"""

import streamlit as st

from pages import shared

st.set_page_config(page_title="Perspective Explorer", page_icon="🧭", layout="wide")

pages = [
    st.Page("pages/home.py", title="Home", icon="🧭", default=True),
    st.Page(shared.DATA_PAGE, title="Data", icon="📥"),
    st.Page("pages/space.py", title="Perspective space", icon="🌌"),
    st.Page("pages/predictions.py", title="Predictions", icon="🎯"),
    st.Page("pages/experiments.py", title="Experiments", icon="🧪"),
]
navigation = st.navigation(pages)
shared.sidebar()
navigation.run()
