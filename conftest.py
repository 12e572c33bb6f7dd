"""pytest's rootdir conftest: the quick/slow ordering of the test files.

The library (``pkps_core``) and the app (``perspective_app``) come from the installed package
(``make test``: ``pip install -e .``); pytest also puts this folder on ``sys.path`` (the
folder of a rootdir ``conftest.py``, its default ``prepend`` import mode), as ``streamlit run
app.py`` does, so a checkout's tests find both without an install too.
"""

import os

# The app compiles UMAP in a background thread at start
# (perspective_app.shared.start_umap_warmup); in the test processes that is ~25 s of CPU no
# test needs (the tests that use UMAP pay it).
os.environ.setdefault("PKPS_UMAP_WARMUP", "0")


def pytest_collection_modifyitems(config, items):
    """The files holding a test marked ``slow`` run first, each file's tests in their own
    order (a stable sort): pytest-xdist's ``--dist loadfile`` hands the files out in this
    order, so the longest ones start at once and the short ones fill in at the end, instead
    of one long file started late keeping one worker busy while the other idles."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
