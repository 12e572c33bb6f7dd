"""AppTest: the app starts and its pages render without exceptions."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_overview_renders_mae_table():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert at.title[0].value == "Perspective Explorer"
    table = at.dataframe[0].value
    assert set(table.index) == {"sample", "dkps", "pkps"}
    assert table.loc["pkps", "MAE"] < table.loc["dkps", "MAE"]
