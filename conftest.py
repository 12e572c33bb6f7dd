"""pytest's rootdir conftest: it puts the repo root on ``sys.path`` for the app's modules.

``app_shared`` and the page scripts sit beside ``app.py`` and are not part of the installed
package; ``streamlit run app.py`` puts this folder on ``sys.path``, and pytest does the same
for the folder of a rootdir ``conftest.py`` (its default ``prepend`` import mode). The
library needs no path setup: ``make test`` installs it (``pip install -e .``).
"""
