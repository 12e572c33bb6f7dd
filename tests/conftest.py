"""Fixtures the test modules share: the AppTests' demo store and recorded downloads, and
a tmpfs for the read-only and full-disk tests (the repository's ``conftest.py`` holds the
run's hooks and the AlpacaEval template; ``tests/browser/conftest.py`` the browser's).

Streamlit is imported inside the fixtures, so the library's tests that use none of them do
not pay for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def demo_store(tmp_path, monkeypatch) -> Path:
    """The demo store built in the test's own folder and made the app's store
    (``PKPS_STORE``); the test may change it freely."""
    from perspective_app import shared
    from pkps_core.demo import ensure_demo_store

    path = ensure_demo_store(tmp_path / "demo.duckdb")
    monkeypatch.setenv(shared.STORE_ENV, str(path))
    return path


@pytest.fixture
def recorded_downloads(monkeypatch) -> dict[str, bytes]:
    """File name → bytes of every download an ``AppTest`` run registers with its data (a
    download generated on click is registered without bytes and is not recorded)."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.testing.v1 import app_test as app_test_module

    files: dict[str, bytes] = {}

    class Recording(MemoryMediaFileStorage):
        def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):
            if filename and isinstance(path_or_data, bytes):
                files[filename] = path_or_data
            return super().load_and_get_id(path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", Recording)
    return files


@pytest.fixture
def mounted(tmp_path):
    """``mounted(options)``: a small tmpfs mounted with ``options`` (``"ro,size=64k"``,
    ``"size=256k"``) in the test's folder, unmounted after the test; the test is skipped
    where mounting is refused (not root, a sandbox)."""
    points = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(points)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", str(point)], capture_output=True)
