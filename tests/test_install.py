"""The package installs and runs outside the checkout: ``pip install``, then ``pkps``.

A fresh virtual environment in a temporary folder (not under the checkout) gets the package
by ``pip install --no-deps <copy of the checkout's package files>``: the
copy holds what the build reads (``pyproject.toml``, ``requirements.txt``, ``README.md``,
``pkps_core/``, ``perspective_app/``) and nothing else of the checkout, so no ``app.py``,
``.streamlit/`` or ``data/`` beside the installed package can help it. Its dependencies
(numpy, Streamlit, …) are not downloaded again: a ``.pth`` file in the new environment puts
this test run's ``site-packages`` after its own, so the package's own modules come from the
new environment (checked) and only the dependencies from this one. The build itself is
pip's usual isolated one: it fetches the build backend ``pyproject.toml`` names (setuptools,
from the package index or pip's cache), as a user's ``pip install`` does.

Then, from a folder outside the checkout with ``XDG_DATA_HOME`` in the temporary folder:
``pkps --help``, ``pkps synth``, one run of the installed app's script (Streamlit's
``AppTest``: the page registry resolves from site-packages) and ``pkps app`` answering HTTP
200 on its port within 60 s, with the demo store built in the user data folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FILES = ["pyproject.toml", "requirements.txt", "README.md", "pkps_core", "perspective_app"]
APP_TIMEOUT = 60.0

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the new environment's bin folder, a work folder outside the checkout, its env)."""
    base = tmp_path_factory.mktemp("install")
    assert not base.resolve().is_relative_to(ROOT)
    source = base / "source"
    for name in PACKAGE_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "test_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            str(source),
        ]
    )
    work = base / "work"
    work.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PKPS_STORE", "PKPS_DATA_DIR", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env |= {"XDG_DATA_HOME": str(base / "xdg"), "HOME": str(base / "home"), "COLUMNS": "100"}
    return venv / "bin", work, env


def test_the_package_comes_from_the_new_environment(installed):
    bin_dir, work, env = installed
    code = "import pkps_core, perspective_app; print(pkps_core.__file__, perspective_app.__file__)"
    printed = _run([str(bin_dir / "python"), "-c", code], cwd=work, env=env).stdout.split()
    venv = bin_dir.parent.resolve()
    assert [Path(p).resolve().is_relative_to(venv) for p in printed] == [True, True], printed
    installed_app = Path(printed[1]).parent
    assert (installed_app / "main.py").is_file()
    assert sorted(p.name for p in (installed_app / "app_pages").glob("*.py"))


def test_pkps_help_and_synth(installed):
    bin_dir, work, env = installed
    help_text = _run([str(bin_dir / "pkps"), "--help"], cwd=work, env=env).stdout
    assert help_text.startswith("usage: pkps ")
    for command in ("synth", "ingest", "predict", "evaluate", "report", "app"):
        assert command in help_text
    out = work / "synthetic.csv"
    printed = _run(
        [str(bin_dir / "pkps"), "synth", "--out", str(out), "--models", "6", "--tasks", "3"],
        cwd=work,
        env=env,
    ).stdout
    assert printed.startswith("wrote ") and out.stat().st_size > 0


def test_installed_app_script_runs_its_pages(installed):
    """One run of each of two pages through the installed ``main.py`` (no server): the page
    scripts are found in site-packages, and the first run builds the demo store."""
    bin_dir, work, env = installed
    code = """
from streamlit.testing.v1 import AppTest
import perspective_app, perspective_app.shared as shared
from pathlib import Path
main = Path(perspective_app.__file__).parent / "main.py"
at = AppTest.from_file(str(main), default_timeout=120).run()
assert not at.exception, at.exception
print(at.title[0].value)
at.switch_page(shared.DATA_PAGE).run()
assert not at.exception, at.exception
print(at.title[0].value)
print(shared.default_store_path())
"""
    env = env | {"XDG_DATA_HOME": str(work / "apptest-data"), "PKPS_UMAP_WARMUP": "0"}
    printed = _run([str(bin_dir / "python"), "-c", code], cwd=work, env=env).stdout.splitlines()
    demo = work / "apptest-data" / "perspective-explorer" / "demo.duckdb"
    assert printed[-3:] == ["Perspective Explorer", "Data", str(demo)]
    with Store(demo) as store:
        assert store.summary()["responses"] > 0


def test_pkps_app_answers_on_its_port_with_the_demo_store_built(installed, tmp_path):
    bin_dir, work, env = installed
    port = _free_port()
    demo = Path(env["XDG_DATA_HOME"]) / "perspective-explorer" / "demo.duckdb"
    assert not demo.exists()
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(bin_dir / "pkps"), "app", "--port", str(port), "--headless"],
            cwd=work,
            env=env | {"PKPS_UMAP_WARMUP": "0"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    status = None
    try:
        deadline = time.monotonic() + APP_TIMEOUT
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as reply:
                    status = reply.status
                    page = reply.read().decode("utf-8", "replace")
                    break
            except OSError:
                time.sleep(0.5)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    printed = log.read_text(encoding="utf-8", errors="replace")
    assert status == 200, f"no HTTP 200 on port {port} within {APP_TIMEOUT} s:\n{printed}"
    assert "<noscript>" in page.lower() or "streamlit" in page.lower()
    assert f"building the demo store in {demo}" in printed
    with Store(demo) as store:
        assert store.summary()["responses"] > 0
