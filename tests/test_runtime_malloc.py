"""glibc's malloc kept from handing freed memory back (``keep_freed_memory``): a large
temporary allocated again is served without fresh page faults; the command and the app
set it at their start; ``PKPS_MALLOC_PAD_MB`` overrides it and a mistyped value is said."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_in_process
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.demo import ensure_demo_store
from pkps_core.space.runtime import MALLOC_PAD_ENV, keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# In a fresh process: the pad the program start sets, then the page faults of allocating
# and freeing a 48 MB array twenty times after a first one (above glibc's largest mmap
# threshold, 32 MB: by default each one is a fresh mapping, faulted in again).
ALLOCATE = """
import json, resource, sys
import numpy as np
from pkps_core.space.runtime import keep_freed_memory, malloc_pad_bytes
keep_freed_memory()
def allocate():
    a = np.ones(6_000_000)
    a += 1.0
allocate()  # the first one's pages are new either way
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    allocate()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
print(json.dumps({"pad": malloc_pad_bytes(), "faults": faults}))
"""


def _allocate(pad: str) -> dict:
    env = os.environ | {MALLOC_PAD_ENV: pad, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", ALLOCATE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="malloc's padding is glibc's")
def test_a_freed_large_array_is_reused_without_fresh_page_faults():
    plain, padded = _allocate("0"), _allocate("256")
    assert plain["pad"] == 0 and padded["pad"] == 256 << 20
    # 48 MB is 11,719 pages: a fresh mapping each time faults them in again (in fewer
    # faults than pages where the kernel maps several at once), the kept memory does not
    assert plain["faults"] > 20 * 200, plain
    assert padded["faults"] * 10 < plain["faults"], (plain, padded)


def test_a_mistyped_pad_is_refused_with_the_variable_named(monkeypatch):
    for text in ("lots", "-1", "4096"):
        monkeypatch.setenv(MALLOC_PAD_ENV, text)
        with pytest.raises(ValueError, match=f"{MALLOC_PAD_ENV}='{text}'.*0 to 2047"):
            keep_freed_memory()
    with pytest.raises(ValueError, match="megabytes=3000"):
        keep_freed_memory(3000)


def test_the_command_says_a_mistyped_pad_and_stops(tmp_path):
    out = run_in_process("synth", "--out", tmp_path / "s.csv", env={MALLOC_PAD_ENV: "lots"})
    assert out.returncode == 2
    assert MALLOC_PAD_ENV in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.skipif(not GLIBC, reason="malloc's padding is glibc's")
def test_the_command_sets_the_pad_at_its_start(tmp_path):
    script = (
        "from pkps_core.cli import main\n"
        "from pkps_core.space.runtime import malloc_pad_bytes\n"
        "before = malloc_pad_bytes()\n"
        f"code = main(['synth', '--out', {str(tmp_path / 's.csv')!r}, '--models', '4',"
        " '--tasks', '2'])\n"
        "print(before, malloc_pad_bytes(), code)\n"
    )
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    env.pop(MALLOC_PAD_ENV, None)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[-3:] == ["0", str(256 << 20), "0"]


def test_the_app_says_a_mistyped_pad_and_runs_on(tmp_path, monkeypatch):
    monkeypatch.setenv(shared.STORE_ENV, str(ensure_demo_store(tmp_path / "demo.duckdb")))
    monkeypatch.setenv(MALLOC_PAD_ENV, "lots")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(MALLOC_PAD_ENV in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.metric  # the home page's numbers are there
