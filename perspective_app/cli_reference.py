"""The CLI reference page, ``docs/reference/cli.md``, written from the ``pkps`` parser.

Regenerate it after changing a command or its help::

    python -m perspective_app.cli_reference > docs/reference/cli.md

``tests/test_cli_reference.py`` fails when the page differs from what this prints. The help
is formatted at a fixed width (:data:`WIDTH`, what ``pkps … --help`` prints in a terminal of
``WIDTH + 2`` columns), without colour, so the page does not depend on the terminal.
"""

from __future__ import annotations

import argparse
import functools
import sys

from perspective_app.cli import PROG, build_parser, subcommands

WIDTH = 98  # argparse wraps at the terminal's columns - 2: COLUMNS=100
REGENERATE = "python -m perspective_app.cli_reference > docs/reference/cli.md"

HEADER = f"""\
# Command-line reference

<!-- Generated from the argparse parser: {REGENERATE}
     (tests/test_cli_reference.py checks this page is current). Do not edit by hand. -->

`{PROG}` is installed with the package (`pip install .`). `{PROG} app` starts the app; every
other command is also `python -m pkps_core <command>`, with the same options. Each section
below is what `{PROG} <command> --help` prints.
"""


def fixed_width(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` set to format its help at :data:`WIDTH` columns, without colour."""
    parser.formatter_class = functools.partial(parser.formatter_class, width=WIDTH)
    if hasattr(parser, "color"):  # Python 3.14+: colour when writing to a terminal
        parser.color = False
    return parser


def help_texts() -> dict[str, str]:
    """``{"pkps": its --help, "pkps synth": …}``: the program's, then each command's."""
    parser = fixed_width(build_parser())
    texts = {PROG: parser.format_help()}
    for name, sub in subcommands(parser).choices.items():
        texts[f"{PROG} {name}"] = fixed_width(sub).format_help()
    return texts


def reference_text() -> str:
    """The page: a header, then one section per command with its help verbatim."""
    sections = [HEADER]
    for title, text in help_texts().items():
        sections.append(f"## `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


if __name__ == "__main__":
    sys.stdout.write(reference_text())
