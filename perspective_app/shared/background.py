"""Work that runs beside a page's script: the UMAP warm-up and long fits with a progress bar
that says how long they should take."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import streamlit as st

from pkps_core import views

UMAP_WARMUP_ENV = "PKPS_UMAP_WARMUP"
UMAP_SPINNER = (
    "Running UMAP on the coordinates… The first UMAP in a server compiles its numerical "
    "code (about 25 s; the app starts this in the background when it opens); later runs "
    "take about a second."
)
_umap_warmup: dict[str, threading.Thread] = {}
_warmup_lock = threading.Lock()


def start_umap_warmup() -> threading.Thread | None:
    """Compile UMAP's numba code once per server, in a background thread, so the first
    UMAP view does not wait ~25 s for it. Off when ``$PKPS_UMAP_WARMUP`` is ``0``."""
    if os.environ.get(UMAP_WARMUP_ENV, "1").strip() == "0":
        return None
    with _warmup_lock:
        if "umap" not in _umap_warmup:
            thread = threading.Thread(target=_warm_umap, name="umap-warmup", daemon=True)
            _umap_warmup["umap"] = thread
            thread.start()
    return _umap_warmup["umap"]


def _warm_umap() -> None:
    try:
        views.umap_2d(np.random.default_rng(0).normal(size=(24, 4)))
    except Exception:  # noqa: BLE001 - optional package absent or broken: the view says so
        pass


def run_in_thread(work, poll, interval: float = 0.5):
    """Run ``work()`` in a thread with the script's context (cached functions work there),
    calling ``poll()`` in the script thread every ``interval`` seconds until it ends (a
    progress bar's update: Streamlit elements are drawn from the script thread only).
    ``work``'s exception is raised here."""
    from streamlit.runtime.scriptrunner import add_script_run_ctx

    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the script thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="page-work", daemon=True)
    add_script_run_ctx(thread)
    thread.start()
    while thread.is_alive():
        thread.join(interval)
        poll()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run_with_progress(work, seconds: float, label: str):
    """Run ``work()`` in a thread while a bar shows the time elapsed against the estimate.

    The bar is time-based (the kernel sums report no progress of their own), labelled as
    an estimate; ``work``'s exception is raised here.
    """
    bar = st.progress(0.0, text=label)
    start = time.monotonic()

    def poll() -> None:
        elapsed = time.monotonic() - start
        bar.progress(
            min(0.99, elapsed / max(seconds, 1e-9)),
            text=f"{label} {elapsed:.0f} s of an estimated {seconds:.0f} s",
        )

    try:
        return run_in_thread(work, poll)
    finally:
        bar.empty()


def remaining_text(fraction: float, elapsed: float) -> str:
    """``"about 40 s left"`` from the pace so far (``fraction`` of the work done in
    ``elapsed`` seconds), or ``""`` before any is done or after all."""
    if fraction <= 0 or fraction >= 1:
        return ""
    return f"{views.duration_text(elapsed / fraction * (1 - fraction))} left"
