"""The README and docs/: every relative link resolves, and no file is named after an issue.

A link is checked against the file system (the file or folder it names, relative to the
page) and, when it has an ``#anchor`` into a Markdown page, against that page's headings
(GitHub's slugs). Links with a scheme (``https:``, ``mailto:``) are not fetched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# [text](target) and ![alt](target); the target ends at whitespace or the closing paren
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
ISSUE_NAME = re.compile(r"issue[-_ ]?\d+", re.IGNORECASE)


def _prose(text: str, *, inline_code: bool = False) -> str:
    """The page without its fenced code blocks and, unless asked, its inline code (links
    there are text)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line if inline_code else re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(page.read_text(encoding="utf-8"), inline_code=True).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: …
        path, _, anchor = target.partition("#")
        resolved = page if not path else (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
    assert broken == [], f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_docs_have_pages():
    assert len(PAGES) > 5
    assert (ROOT / "docs" / "index.md") in PAGES


def test_slug_follows_github():
    assert _slug("Kept in the store, never stale") == "kept-in-the-store-never-stale"
    assert _slug("`predict --targets`: judged") == "predict---targets-judged"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_no_tracked_file_is_named_after_an_issue():
    """A file's name says what it holds; which issue asked for it is in git's history."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    named = [p for p in listed.stdout.splitlines() if ISSUE_NAME.search(p)]
    assert named == []
