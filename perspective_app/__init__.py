"""Perspective Explorer's app: the Streamlit pages over :mod:`pkps_core`, and the ``pkps`` command.

- ``main.py``: the Streamlit entrypoint (``pkps app`` runs it; a checkout's ``app.py`` runs
  the same :func:`perspective_app.main.run`);
- ``app_pages/``: one script per page, declared once in :mod:`perspective_app.shared.pages`
  (not ``pages/``: Streamlit takes a ``pages/`` folder beside its main script for its
  older multipage mode, which ignores ``st.navigation`` on a server's first run);
- :mod:`perspective_app.shared`: what the pages share (store, caches, widgets, sidebar);
- :mod:`perspective_app.cli`: the ``pkps`` console command.

The library, :mod:`pkps_core`, never imports this package nor Streamlit.
"""
