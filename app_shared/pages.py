"""The app's pages, declared once: script, title, icon.

``app.py`` builds its navigation from :data:`PAGES`; links (``PAGES["data"].link(...)``)
and tests (``AppTest.switch_page(PAGES["data"].path)``) read the same entries, so a page is
renamed or moved in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class PageEntry:
    """One page: its script (relative to ``app.py``), title and Material icon."""

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


# Navigation order. Streamlit's bundled Material icons, not emoji: emoji need a colour-emoji
# font, which headless browsers and many servers lack (they render as empty boxes).
PAGES = {
    "home": PageEntry("app_pages/home.py", "Home", icon=":material/explore:", default=True),
    "leaderboard": PageEntry(
        "app_pages/leaderboard.py", "Leaderboard", icon=":material/leaderboard:"
    ),
    "data": PageEntry("app_pages/data.py", "Data", icon=":material/upload_file:"),
    "new_model": PageEntry("app_pages/new_model.py", "New model", icon=":material/person_add:"),
    "space": PageEntry("app_pages/space.py", "Perspective space", icon=":material/scatter_plot:"),
    "predictions": PageEntry("app_pages/predictions.py", "Predictions", icon=":material/target:"),
    "experiments": PageEntry("app_pages/experiments.py", "Experiments", icon=":material/science:"),
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
