"""Perspective Explorer — the Streamlit entrypoint: page config, shared sidebar, navigation.

``pkps app`` runs this script (``streamlit run <package>/main.py``); from a checkout,
``streamlit run app.py`` runs the same :func:`run`. The pages are in ``app_pages/`` beside it
(a folder named ``pages/`` here would put Streamlit's first run in its older multipage mode,
which runs a page without this script's sidebar), declared once in
:mod:`perspective_app.shared.pages`; what they share is in :mod:`perspective_app.shared`. The
active store is the embedded demo store (``demo.duckdb`` in :func:`pkps_core.demo.data_dir`,
built on first run) unless the ``PKPS_STORE`` environment variable names another ``.duckdb``
file; the sidebar switches stores at run time.
"""

import streamlit as st

from perspective_app import shared
from pkps_core.space.runtime import keep_freed_memory


def run() -> None:
    """One run of the app: page config, navigation, the shared sidebar, the chosen page."""
    # Streamlit's bundled Material icons, not emoji: emoji need a colour-emoji font, which
    # headless browsers and many servers lack (they render as empty boxes).
    st.set_page_config(
        page_title="Perspective Explorer", page_icon=":material/explore:", layout="wide"
    )
    try:  # the fits' temporaries reuse freed memory (pkps_core.space.runtime)
        keep_freed_memory()
    except ValueError as exc:  # a mistyped PKPS_MALLOC_PAD_MB: said, and the app runs on
        st.warning(str(exc))
    navigation = shared.navigation()
    shared.sidebar()
    try:
        navigation.run()
    finally:  # the sidebar's version read is this run's only (st.stop and reruns included)
        shared.forget_run_version()


if __name__ == "__main__":  # Streamlit runs its main script as __main__, on every rerun
    run()
