"""The ```python blocks of the README and docs/ run as they stand.

Each page's blocks run in order, each in a fresh namespace, in a temporary folder (they may
write a store or a report there). The README's example is quick; the docs' pages fit
predictors and are marked slow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _pages_with_python() -> list:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    params = []
    for page in pages:
        if BLOCK.search(page.read_text(encoding="utf-8")):
            marks = [] if page.name == "README.md" else [pytest.mark.slow]
            params.append(pytest.param(page, marks=marks, id=str(page.relative_to(ROOT))))
    return params


@pytest.mark.parametrize("page", _pages_with_python())
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    for number, code in enumerate(blocks, start=1):
        try:
            exec(compile(code, f"{page.name}, python block {number}", "exec"), {})
        except Exception as error:  # the page and block in the failure
            raise AssertionError(f"{page.name}, python block {number}: {error!r}") from error


def test_the_readme_has_one_python_example_of_at_most_ten_lines():
    blocks = BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 1
    assert len([line for line in blocks[0].splitlines() if line.strip()]) <= 10
