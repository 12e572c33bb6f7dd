"""Home: what the tool does and where to go."""

import streamlit as st

from perspective_app import shared

st.title("Perspective Explorer")
st.write(
    "Predict LLM benchmark scores from **sparse, unpaired caches** of evaluated responses. "
    "The Product Kernel Perspective Space (PKPS) compares models through their responses to "
    "*similar* queries, so models that never answered the same question can still be placed "
    "next to each other; DKPS, its paired special case, only compares identical queries."
)
path = shared.active_path()
summary = shared.store_summary(path, shared.active_store().version)
left, middle, right = st.columns(3)
left.metric("Models", summary["models"])
middle.metric("Tasks", summary["tasks"])
right.metric("Responses", f"{summary['responses']:,}")
if shared.is_demo(path):
    st.caption(
        "The active store is the embedded demo: a synthetic cache (the PKPS paper's generator) "
        "with 70 % task coverage and no shared queries (ρ = 0), where DKPS has nothing to "
        "compare and PKPS still works."
    )

shared.PAGES["data"].link("Data — upload caches, coverage and pairing")
shared.PAGES["new_model"].link(
    "New model — one model's predicted scores, rank, neighbours and what to evaluate next"
)
shared.PAGES["space"].link("Perspective space — PKPS next to DKPS")
shared.PAGES["predictions"].link("Predictions — methods, errors, export")
