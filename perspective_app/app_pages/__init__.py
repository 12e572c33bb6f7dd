"""The page scripts: Streamlit runs each one as a page (never imported).

This file makes the folder a package only so that it is installed with ``perspective_app``;
the pages are declared in :mod:`perspective_app.shared.pages`.
"""
