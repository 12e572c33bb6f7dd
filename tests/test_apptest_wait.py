"""The conftest's wait for AppTest's script runs (``_wait_for_the_script_thread``): it is
the one AppTest uses, returns as the run ends, and fails a run that outlasts its timeout
as upstream does."""

import time

import pytest
from streamlit.testing.v1 import AppTest, local_script_runner


def test_apptest_waits_through_the_conftest():
    assert local_script_runner.require_widgets_deltas.__module__ == "conftest"


def test_a_run_returns_with_its_elements_as_it_ends():
    at = AppTest.from_string("import streamlit as st\nst.write('done')").run(timeout=5)
    assert [m.value for m in at.markdown] == ["done"]


def test_a_run_past_its_timeout_fails_and_is_stopped():
    script = "import time\nimport streamlit as st\ntime.sleep(0.6)\nst.write('late')"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"timed out after 0.2\(s\)"):
        AppTest.from_string(script).run(timeout=0.2)
    # the wait ended at the timeout, then the stopped runner was joined
    assert time.monotonic() - started < 5
