"""docs/reference/cli.md is what ``pkps --help`` and each command's ``--help`` print."""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perspective_app import cli_reference
from perspective_app.cli import PROG, build_parser, main, subcommands

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"
STALE = f"docs/reference/cli.md is stale; regenerate it: {cli_reference.REGENERATE}"


def _page_sections() -> dict[str, str]:
    """The page's ``## `pkps …``` sections: title → the help text in its code block."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(r"^## `([^`]+)`\n\n```text\n(.*?)\n```$", text, flags=re.M | re.S)
    return {title: body + "\n" for title, body in found}


def test_page_is_what_the_generator_writes():
    assert PAGE.read_text(encoding="utf-8") == cli_reference.reference_text(), STALE


def test_page_has_the_program_and_every_command_once():
    commands = list(subcommands(build_parser()).choices)
    assert "app" in commands and "synth" in commands and "ingest" in commands
    assert list(_page_sections()) == [PROG] + [f"{PROG} {name}" for name in commands]


def _printed_help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    return out.getvalue()


def test_each_section_is_what_the_command_prints(monkeypatch):
    """``pkps [command] --help`` in a terminal of WIDTH + 2 columns prints the section."""
    monkeypatch.setenv("COLUMNS", str(cli_reference.WIDTH + 2))
    sections = _page_sections()
    for title, text in sections.items():
        argv = title.split()[1:] + ["--help"]
        assert _printed_help(argv) == text, f"{title}: {STALE}"


def test_the_installed_command_prints_the_first_section():
    """The console script itself (``pip install -e .`` puts it beside this Python)."""
    pkps = shutil.which(PROG, path=str(Path(sys.executable).parent))
    if pkps is None:
        pytest.skip("no pkps console script beside this Python: pip install -e . makes it")
    env = os.environ | {"COLUMNS": str(cli_reference.WIDTH + 2)}
    printed = subprocess.run(
        [pkps, "--help"], env=env, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert printed == _page_sections()[PROG]


def test_a_changed_help_text_is_caught(monkeypatch):
    """The comparison sees a one-word change in one command's help."""
    original = cli_reference.build_parser

    def changed():
        parser = original()
        sub = subcommands(parser).choices["info"]
        sub.description = "a description the page does not have"
        return parser

    monkeypatch.setattr(cli_reference, "build_parser", changed)
    assert PAGE.read_text(encoding="utf-8") != cli_reference.reference_text()
