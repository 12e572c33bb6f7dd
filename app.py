"""Perspective Explorer — the Streamlit entrypoint: page config, shared sidebar, navigation.

The pages are in ``app_pages/`` and declared once in :mod:`app_shared.pages`; what they share
is in :mod:`app_shared`. The active store is the embedded demo store (``demo.duckdb`` in
:func:`pkps_core.demo.data_dir`, built on first run) unless the ``PKPS_STORE`` environment
variable names another ``.duckdb`` file; the sidebar switches stores at run time.
"""

import streamlit as st

import app_shared as shared

# Streamlit's bundled Material icons, not emoji: emoji need a colour-emoji font, which
# headless browsers and many servers lack (they render as empty boxes).
st.set_page_config(page_title="Perspective Explorer", page_icon=":material/explore:", layout="wide")

navigation = shared.navigation()
shared.sidebar()
navigation.run()
