"""AppTest of the Predictions page's layout and issue 19's items on it: the answer first
(tabs), every download built eagerly, reasons for missing predictions on screen, and
"What to evaluate next" following the chosen target."""

import io
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from perspective_app import shared

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600


def _predict(at: AppTest, methods: list[str], targets: list[str]) -> AppTest:
    at.multiselect[0].set_value(methods)
    at.multiselect[1].set_value(targets)
    next(b for b in at.button if b.label == "Predict").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return at


@pytest.mark.slow
def test_the_page_is_tabs_with_the_summary_first_and_eager_downloads(
    demo_store, recorded_downloads
):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    assert not at.exception
    assert [t.label for t in at.tabs] == [
        "Summary",
        "Per task",
        "Cells",
        "What to evaluate next",
        "Export",
    ]
    assert {b.key for b in at.get("download_button")} >= {
        "pred_download_csv",
        "pred_download_parquet",
        "pred_download_coordinates",
    }
    coordinates = pd.read_csv(io.BytesIO(recorded_downloads["coordinates.csv"]))
    assert set(coordinates["space"]) == {"pkps", "dkps"}
    assert not coordinates["model"].str.contains("shadow").any()
    figure = next(c for c in at.get("plotly_chart") if c.key == "pred_scatter")
    assert '"error_y"' not in figure.proto.spec  # no bar on every cell


@pytest.mark.slow
def test_missing_predictions_say_why_and_next_follows_the_target(demo_store):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    models = at.multiselect[1].options
    _predict(at, ["sample", "aipw", "pkps"], [models[5]])
    mae = at.dataframe[0].value
    unexplained = set(mae.index[mae["cells_predicted"] < mae["cells"]])
    assert unexplained, "the demo leaves some cells unpredicted (the test needs one)"
    notes = at.dataframe[1].value
    assert set(notes["method"]) == unexplained
    assert (notes["note"].str.len() > 0).all()
    assert at.selectbox(key="pred_next_model").value == models[5]

    # a second Predict right after the first keeps its edits (keyed form widgets)
    _predict(at, ["sample", "pkps"], [models[9], models[2]])
    assert list(at.dataframe[0].value.index) == ["sample", "pkps"]
    assert at.selectbox(key="pred_next_model").value == models[9]
    at.selectbox(key="pred_next_model").set_value(models[2]).run()
    assert at.selectbox(key="pred_next_model").value == models[2]  # the user's pick stays
