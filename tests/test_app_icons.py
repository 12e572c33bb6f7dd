"""Icons are Streamlit's bundled Material symbols: emoji render as empty boxes where no
colour-emoji font is installed (a headless Chromium, many servers) — issue 18."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ICON = re.compile(r"""icon\s*=\s*(["'])(.*?)\1""")


def test_every_icon_in_the_app_is_a_material_symbol():
    sources = [
        ROOT / "app.py",
        *sorted((ROOT / "perspective_app").rglob("*.py")),
    ]
    icons = [
        (path.name, match.group(2))
        for path in sources
        for match in ICON.finditer(path.read_text(encoding="utf-8"))
    ]
    assert len(icons) >= 6  # the navigation's pages at least
    odd = [(name, icon) for name, icon in icons if not re.fullmatch(r":material/[a-z_]+:", icon)]
    assert odd == []
