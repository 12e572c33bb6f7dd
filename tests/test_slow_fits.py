"""The RBF response kernel's cost is estimated and said before it runs (issue 19).

On AlpacaEval (32k responses) the fit took about three minutes with only a spinner; the
page now estimates the time from a timed sample, asks, keeps the linear kernel's maps on
screen meanwhile (issue 38), and shows a bar against the estimate while it fits.
"""

import json
import time
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core import views
from pkps_core.space.kernels import ResponseLayout
from pkps_core.space.pairwise import pairwise_sums
from pkps_core.space.sums import DEFAULT_BLOCK_BYTES

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.mark.slow
def test_a_slow_rbf_fit_is_estimated_and_asked_for_first(demo_store, monkeypatch):
    monkeypatch.setattr(shared, "SLOW_FIT_SECONDS", 0.0)  # every RBF fit counts as slow
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.SPACE_PAGE).run()
    at.selectbox(key="space_response_kernel").set_value("rbf").run()
    assert not at.exception, [e.message for e in at.exception]
    warning = next(w.value for w in at.main.warning if "RBF response kernel" in w.value)
    assert "estimated from a timed sample" in warning and "6 times" in warning
    # the current (linear) maps stay on screen until the RBF maps are ready
    assert "the linear kernel's until the RBF fit is done" in warning
    linear = json.loads(next(c for c in at.get("plotly_chart") if c.key == "space_maps").proto.spec)

    next(b for b in at.button if b.key == "space_fit_rbf").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("Fitted with the RBF response kernel in" in c.value for c in at.main.caption)
    fitted = json.loads(next(c for c in at.get("plotly_chart") if c.key == "space_maps").proto.spec)
    assert fitted["data"][0]["x"] != linear["data"][0]["x"]  # the RBF maps, not the linear
    # once fitted (and cached) it is not asked again
    at.selectbox(key="space_colour_by").set_value(
        at.selectbox(key="space_colour_by").options[-1]
    ).run()
    assert not any(b.key == "space_fit_rbf" for b in at.button)
    assert json.loads(next(c for c in at.get("plotly_chart") if c.key == "space_maps").proto.spec)


def test_the_linear_kernel_is_not_asked_for(demo_store, monkeypatch):
    monkeypatch.setattr(shared, "SLOW_FIT_SECONDS", 0.0)
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(shared.SPACE_PAGE).run()
    assert not any(b.key == "space_fit_rbf" for b in at.button)
    assert "space_maps" in {c.key for c in at.get("plotly_chart")}


def test_the_estimate_is_of_the_order_of_the_real_pair_sum():
    n, models = 6000, 40
    rng = np.random.default_rng(1)
    layout = ResponseLayout.build(np.sort(np.arange(n) % models), np.arange(n) % 600, models, 600)
    features = rng.normal(size=(n, 49))
    query_kernel = np.exp(-rng.random((600, 600)))
    estimate = views.rbf_fit_seconds(n, models, 49, 1)
    runs = []
    for _ in range(2):  # the better of two, as the estimate times its sample
        start = time.perf_counter()
        pairwise_sums(layout, features, query_kernel, "rbf", 1.0, DEFAULT_BLOCK_BYTES)
        runs.append(time.perf_counter() - start)
    actual = min(runs)
    assert actual / 4 < estimate < actual * 4, (estimate, runs)


def test_passes_and_duration_text():
    assert views.rbf_passes("rbf") == 6 and views.rbf_passes("delta") == 1
    assert views.duration_text(42.4) == "about 42 s"
    assert views.duration_text(178) == "about 3 min"
