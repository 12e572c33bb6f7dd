"""Perspective Explorer from a checkout: ``streamlit run app.py``.

The app lives in the ``perspective_app`` package (``pkps app`` runs it once installed); this
script runs the same entrypoint, :func:`perspective_app.main.run`, on every rerun.
"""

from perspective_app.main import run

run()
