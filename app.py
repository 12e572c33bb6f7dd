"""Perspective Explorer — the Streamlit entrypoint: page config, shared sidebar, navigation.

The pages are in ``app_pages/``, what they share in ``app_shared.py``. The active store is
the embedded demo store (``demo.duckdb`` in :func:`pkps_core.demo.data_dir`, built on first
run) unless the ``PKPS_STORE`` environment variable names another ``.duckdb`` file; the
sidebar switches stores at run time.
"""

import streamlit as st

import app_shared as shared

# Streamlit's bundled Material icons, not emoji: emoji need a colour-emoji font, which
# headless browsers and many servers lack (they render as empty boxes).
st.set_page_config(page_title="Perspective Explorer", page_icon=":material/explore:", layout="wide")

NEW_MODEL_PAGE = "app_pages/new_model.py"
pages = [
    st.Page(shared.HOME_PAGE, title="Home", icon=":material/explore:", default=True),
    st.Page("app_pages/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:"),
    st.Page(shared.DATA_PAGE, title="Data", icon=":material/upload_file:"),
    st.Page(NEW_MODEL_PAGE, title="New model", icon=":material/person_add:"),
    st.Page(shared.SPACE_PAGE, title="Perspective space", icon=":material/scatter_plot:"),
    st.Page(shared.PREDICTIONS_PAGE, title="Predictions", icon=":material/target:"),
    st.Page(shared.EXPERIMENTS_PAGE, title="Experiments", icon=":material/science:"),
]
navigation = st.navigation(pages)
shared.sidebar()
navigation.run()
