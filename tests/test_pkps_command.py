"""The ``pkps`` command: pkps_core's commands under its name, and ``pkps app``'s launch."""

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from perspective_app import cli
from pkps_core.cli import build_parser as build_core_parser
from pkps_core.demo import DATA_DIR_ENV
from pkps_core.store import Store

ROOT = Path(__file__).resolve().parents[1]


def test_pkps_has_every_pkps_core_command_and_app():
    core = list(cli.subcommands(build_core_parser()).choices)
    pkps = cli.build_parser()
    assert list(cli.subcommands(pkps).choices) == core + ["app"]
    assert pkps.prog == "pkps"
    assert cli.subcommands(pkps).choices["synth"].prog == "pkps synth"
    assert build_core_parser().prog == "python -m pkps_core"  # unchanged


def test_pkps_synth_writes_what_python_m_pkps_core_writes(tmp_path):
    args = ["--models", "6", "--tasks", "3", "--seed", "3"]
    assert cli.main(["synth", "--out", str(tmp_path / "a.parquet"), *args]) == 0
    from pkps_core.cli import main as core_main

    assert core_main(["synth", "--out", str(tmp_path / "b.parquet"), *args]) == 0
    first = pd.read_parquet(tmp_path / "a.parquet")
    assert len(first) > 0
    pd.testing.assert_frame_equal(first, pd.read_parquet(tmp_path / "b.parquet"))


def test_pkps_reports_input_errors_like_pkps_core(tmp_path, capsys):
    assert cli.main(["info", "--db", str(tmp_path / "missing" / "x.duckdb")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def _app_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["app", *argv])


def _options(command: list[str]) -> dict[str, str]:
    flags = command[5:]
    return {flags[i].removeprefix("--"): flags[i + 1] for i in range(0, len(flags), 2)}


def test_app_runs_the_packaged_main_script_with_the_store(tmp_path, monkeypatch):
    monkeypatch.delenv("PKPS_STORE", raising=False)
    store = tmp_path / "mine.duckdb"
    command, env = cli.app_command(_app_args("--store", str(store), "--port", "8765"))
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(cli.MAIN_SCRIPT)]
    assert cli.MAIN_SCRIPT == ROOT / "perspective_app" / "main.py"
    options = _options(command)
    assert options["server.port"] == "8765"
    assert options["server.address"] == "127.0.0.1"
    assert options["server.headless"] == "false"
    assert env["PKPS_STORE"] == str(store.resolve())
    assert not store.exists()  # the app opens (and creates) it, not the launcher


def test_app_builds_the_demo_store_when_no_store_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("PKPS_STORE", raising=False)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    command, env = cli.app_command(_app_args("--headless", "--address", "0.0.0.0"))
    assert "PKPS_STORE" not in env
    assert _options(command)["server.headless"] == "true"
    assert _options(command)["server.address"] == "0.0.0.0"
    with Store(tmp_path / "data" / "demo.duckdb") as store:
        assert store.summary()["responses"] > 0


def test_app_keeps_the_store_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.setenv("PKPS_STORE", str(tmp_path / "env.duckdb"))
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    _, env = cli.app_command(_app_args())
    assert env["PKPS_STORE"] == str(tmp_path / "env.duckdb")
    assert not (tmp_path / "data").exists()  # no demo store built


def test_app_refuses_a_folder_as_store(tmp_path, capsys):
    assert cli.main(["app", "--store", str(tmp_path)]) == 2
    assert "folder" in capsys.readouterr().err


def test_app_refuses_a_store_it_could_not_write_before_starting(mounted, capsys):
    point = mounted("ro,size=64k")
    assert cli.main(["app", "--store", str(point / "new.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --store: ") and "Read-only file system" in err
    assert len(err.strip().splitlines()) == 1


def test_app_hands_the_process_to_streamlit(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "name", "posix")
    called = {}

    def execve(path, argv, env):
        called.update(path=path, argv=argv, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(SystemExit):
        cli.main(["app", "--store", str(tmp_path / "s.duckdb"), "--port", "9999"])
    assert called["path"] == sys.executable
    assert called["argv"][2:5] == ["streamlit", "run", str(cli.MAIN_SCRIPT)]
    assert called["env"]["PKPS_STORE"] == str((tmp_path / "s.duckdb").resolve())


def test_app_options_are_the_checkouts_streamlit_config():
    """``streamlit run app.py`` reads .streamlit/config.toml from the checkout; ``pkps app``
    gives the same settings on its command line (an installed package has no such file)."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    settings = {
        f"{section}.{key}": str(value).lower() if isinstance(value, bool) else str(value)
        for section, values in config.items()
        for key, value in values.items()
    }
    launched = _options(cli.app_command(_app_args("--store", "x.duckdb"))[0])
    assert {key: launched.get(key) for key in settings} == settings


def test_the_other_commands_do_not_import_streamlit():
    code = "import sys, perspective_app.cli; print('streamlit' in sys.modules)"
    printed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert printed.strip() == "False"
