"""Every widget shows what the result used: kernels that differ (or one offered, with
why), the disabled bandwidth slider after a kernel change, the highlight following new
targets, and statuses that say what happened this time."""

import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared
from pkps_core.space import RESPONSE_KERNEL_NOTE
from pkps_core.views.new_model import run_status

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600


@pytest.mark.slow
def test_linear_and_cosine_are_one_kernel_offered_once_with_the_reason(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(shared.SPACE_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="space_response_kernel").options == ["linear", "rbf"]
    assert any(RESPONSE_KERNEL_NOTE in c.value for c in at.caption)
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    assert at.selectbox(key="pred_response_kernel").options == ["linear", "rbf"]
    done = subprocess.run(
        [sys.executable, "-m", "pkps_core", "predict", "--input", "x.csv", "--out", "p.csv",
         "--response-kernel", "cosine"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "invalid choice: 'cosine'" in done.stderr


def test_the_disabled_bandwidth_slider_follows_a_kernel_change(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(shared.SPACE_PAGE).run()
    chosen = at.select_slider(key="space_bandwidth_shown").value
    assert chosen > 0  # cross-validated RBF
    at.radio(key="space_query_kernel").set_value("delta").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.select_slider(key="space_bandwidth_shown").value == 0  # the delta limit in use
    at.radio(key="space_query_kernel").set_value("rbf").run()
    assert at.select_slider(key="space_bandwidth_shown").value == chosen


@pytest.mark.slow
def test_the_interval_highlight_follows_new_targets(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    models = at.multiselect(key="pred_targets").options

    def predict(targets):
        at.multiselect(key="pred_methods").set_value(["sample", "pkps"])
        at.multiselect(key="pred_targets").set_value(targets)
        next(b for b in at.button if b.label == "Predict").click().run()
        assert not at.exception, [e.message for e in at.exception]

    predict([])
    assert at.selectbox(key="pred_highlight").value == "(none)"
    predict([models[4], models[1]])
    status = next(e for e in at.main.children.values() if e.type == "status")
    assert "(2 computed now, 0 read from the cache" in status.label
    assert at.selectbox(key="pred_highlight").value == models[4]
    at.selectbox(key="pred_highlight").set_value("(none)").run()
    assert at.selectbox(key="pred_highlight").value == "(none)"  # the user's pick stays
    # the rerun did not recompute, and its status says so
    status = next(e for e in at.main.children.values() if e.type == "status")
    assert "(0 computed now, 2 read from the cache" in status.label


def test_the_new_model_status_says_whether_it_computed_now():
    class Report:
        elapsed = 4.0
        computed_at = 100.0

    assert run_status(Report, 99.0, placed=False) == "Predicted in 4.0 s (refitted)"
    cached = run_status(Report, 101.0, placed=True)
    assert cached.startswith("Shown from the cache") and "placed by" in cached
