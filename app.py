"""Perspective Explorer — the Streamlit entrypoint: page config and navigation."""

import streamlit as st

st.set_page_config(page_title="Perspective Explorer", page_icon="🧭", layout="wide")

pages = [
    st.Page("pages/overview.py", title="Overview", icon="🧭", default=True),
]
st.navigation(pages).run()
