"""The app's pages, declared once: script, title, icon.

``perspective_app/main.py`` builds its navigation from :data:`PAGES`; links
(``PAGES["data"].link(...)``) and tests (``AppTest.switch_page(PAGES["data"].path)``) read the
same entries, so a page is renamed or moved in one place.

The scripts are named by absolute path (``perspective_app/app_pages/*.py`` where the package is,
a checkout or an installed wheel): Streamlit resolves a relative page path against the main
script's folder, which is the checkout's root for ``streamlit run app.py`` and the package's
folder for ``pkps app``; an absolute one means the same file in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st


@dataclass(frozen=True)
class PageEntry:
    """One page: its script (an absolute path), title and Material icon."""

    path: str
    title: str
    icon: str
    default: bool = False

    def page(self):
        """The ``st.Page`` of this entry (for ``st.navigation``)."""
        return st.Page(self.path, title=self.title, icon=self.icon, default=self.default)

    def link(self, label: str | None = None) -> None:
        """A ``st.page_link`` to this page (default label: its title)."""
        st.page_link(self.path, label=label or self.title, icon=self.icon)


PAGES_DIR = Path(__file__).resolve().parents[1] / "app_pages"


def _script(name: str) -> str:
    return str(PAGES_DIR / f"{name}.py")


# Navigation order. Streamlit's bundled Material icons, not emoji: emoji need a colour-emoji
# font, which headless browsers and many servers lack (they render as empty boxes).
PAGES = {
    "home": PageEntry(_script("home"), "Home", icon=":material/explore:", default=True),
    "leaderboard": PageEntry(_script("leaderboard"), "Leaderboard", icon=":material/leaderboard:"),
    "data": PageEntry(_script("data"), "Data", icon=":material/upload_file:"),
    "new_model": PageEntry(_script("new_model"), "New model", icon=":material/person_add:"),
    "space": PageEntry(_script("space"), "Perspective space", icon=":material/scatter_plot:"),
    "predictions": PageEntry(_script("predictions"), "Predictions", icon=":material/target:"),
    "experiments": PageEntry(_script("experiments"), "Experiments", icon=":material/science:"),
}

# The scripts by name, for AppTest.switch_page and the pages' own links.
HOME_PAGE = PAGES["home"].path
DATA_PAGE = PAGES["data"].path
NEW_MODEL_PAGE = PAGES["new_model"].path
SPACE_PAGE = PAGES["space"].path
PREDICTIONS_PAGE = PAGES["predictions"].path
EXPERIMENTS_PAGE = PAGES["experiments"].path
LEADERBOARD_PAGE = PAGES["leaderboard"].path


def navigation():
    """``st.navigation`` over :data:`PAGES`, in their order."""
    return st.navigation([entry.page() for entry in PAGES.values()])
