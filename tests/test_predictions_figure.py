"""The Predictions page's predicted-vs-reference figure and its method notes
(pkps_core.views.predictions), at the size the issue names: 1,000 cells per method."""

import base64
import json

import numpy as np
import pandas as pd

from pkps_core import views


def _predictions(n_models=100, n_tasks=10, methods=("sample", "pkps", "irt")) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frames = []
    for method in methods:
        reference = rng.uniform(0, 1, n_models * n_tasks)
        prediction = np.clip(reference + rng.normal(0, 0.1, len(reference)), 0, 1)
        note = np.full(len(reference), "", dtype=object)
        if method == "irt":  # a method that does not apply to half of the cells
            prediction[::2] = np.nan
            note[::2] = "task is not binary"
        frames.append(
            pd.DataFrame(
                {
                    "model": np.repeat([f"m{i}" for i in range(n_models)], n_tasks),
                    "task": np.tile([f"t{j}" for j in range(n_tasks)], n_models),
                    "method": method,
                    "prediction": prediction,
                    "reference_score": reference,
                    "lower": prediction - 0.1,
                    "upper": prediction + 0.1,
                    "extrapolation": rng.uniform(size=len(reference)) < 0.05,
                    "note": note,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _plain(value):
    """Plotly's base64 typed arrays decoded to lists, recursively."""
    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _figure(scored, **kwargs) -> dict:
    """The figure's JSON with plain arrays."""
    return _plain(json.loads(views.predicted_vs_reference_figure(scored, **kwargs).to_json()))


def test_a_thousand_cells_are_points_without_error_bars():
    scored = views.error_bar_frame(_predictions())
    figure = _figure(scored, level=0.9)
    points = [t for t in figure["data"] if t["type"] == "scattergl"]
    assert all("error_y" not in t for t in figure["data"])
    assert {t["mode"] for t in points} == {"markers"}
    per_facet = {}
    for trace in points:
        count = len(trace["customdata"])
        per_facet[trace["xaxis"]] = per_facet.get(trace["xaxis"], 0) + count
    assert per_facet == {"x": 1000, "x2": 1000, "x3": 500}  # irt: half its cells
    assert "interval %{customdata[2]:.3f}" in points[0]["hovertemplate"]


def test_one_facet_per_method_with_identity_line_and_equal_axes():
    scored = views.error_bar_frame(_predictions())
    figure = _figure(scored, level=0.9)
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    assert titles == ["sample", "pkps", "irt"]
    identity = [t for t in figure["data"] if t.get("mode") == "lines"]
    assert len(identity) == 3
    assert all(t["x"] == t["y"] for t in identity)
    layout = figure["layout"]
    for suffix in ("", "2", "3"):
        x, y = layout[f"xaxis{suffix}"], layout[f"yaxis{suffix}"]
        assert x["range"] == y["range"]
        assert y["scaleanchor"] == f"x{suffix}"
        assert x["title"]["text"] == "reference (mean score)"
        assert y["title"]["text"] == "predicted (mean score)"


def test_highlighted_model_alone_gets_error_bars_and_names_are_escaped():
    predictions = _predictions(n_models=5, n_tasks=3, methods=("pkps",))
    predictions["model"] = predictions["model"].replace("m2", "<b>m2</b>")
    scored = views.error_bar_frame(predictions)
    figure = _figure(scored, highlight="<b>m2</b>", level=0.9)
    bars = [t for t in figure["data"] if "error_y" in t]
    assert len(bars) == 1 and len(bars[0]["x"]) == 3
    assert bars[0]["name"].startswith("&lt;b&gt;m2&lt;/b&gt;")
    models = {row[0] for t in figure["data"] if "customdata" in t for row in t["customdata"]}
    assert "&lt;b&gt;m2&lt;/b&gt;" in models and "<b>m2</b>" not in models


def test_extrapolation_warned_cells_are_a_separate_colour():
    scored = views.error_bar_frame(_predictions(methods=("pkps",)))
    figure = _figure(scored, level=0.9)
    traces = {t["name"]: t for t in figure["data"] if t["type"] == "scattergl"}
    assert traces["cells"]["marker"]["color"] != traces["extrapolation warned"]["marker"]["color"]
    assert len(traces["extrapolation warned"]["customdata"]) == int(scored["extrapolation"].sum())


def test_method_notes_say_why_cells_are_missing():
    notes = views.method_notes(_predictions())
    assert notes.to_dict("records") == [
        {"method": "irt", "cells": 500, "note": "task is not binary"}
    ]
