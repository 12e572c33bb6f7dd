"""The app's data shaping (pkps_core.views) and uploads (pkps_core.uploads), tested without
Streamlit."""

import io
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest

from pkps_core import views
from pkps_core.predict import OUTPUT_COLUMNS, predict
from pkps_core.records import RecordsError, cell_table, validate_records
from pkps_core.space import PerspectiveSpace
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic
from pkps_core.uploads import read_uploads


def _cells() -> pd.DataFrame:
    records = pd.DataFrame(
        {
            "model": ["b/x", "b/x", "a/y", "a/y", "c/z"],
            "task": ["t1", "t2", "t1", "t1", "t2"],
            "query_id": ["q1", "q2", "q1", "q3", "q2"],
            "score": [0.2, 0.4, 1.0, 0.0, 0.9],
        }
    )
    return cell_table(validate_records(records))


def _csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def _small_records() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["m1", "m1", "m2"],
            "task": ["t", "t", "t"],
            "query_id": ["1", "2", "1"],
            "response": ["yes", "no", "yes"],
            "score": [1, 0, 1],
        }
    )


# ---------------------------------------------------------------------- uploads


def test_read_uploads_combines_files_and_reports_per_file():
    other = _small_records().assign(model=["m3", "m3", "m4"])
    result = read_uploads([("a.csv", _csv(_small_records())), ("b.csv", _csv(other))])
    assert sorted(result.records["model"].unique()) == ["m1", "m2", "m3", "m4"]
    assert result.per_file["rows"].tolist() == [3, 3]
    assert result.per_file["format"].tolist() == ["canonical", "canonical"]
    assert result.source == "a.csv, b.csv"


def test_read_uploads_names_the_file_and_rows_of_a_schema_error():
    bad = _small_records()
    bad.loc[2, "query_id"] = "1"
    bad.loc[2, "model"] = "m1"
    with pytest.raises(RecordsError, match=r"^bad\.csv: duplicate .* rows 1, 3"):
        read_uploads(
            [
                ("good.csv", _csv(_small_records().assign(model=["g1", "g1", "g2"]))),
                ("bad.csv", _csv(bad)),
            ]
        )


def test_read_uploads_rejects_the_same_response_in_two_files():
    with pytest.raises(RecordsError, match=r"appears in a\.csv and b\.csv"):
        read_uploads([("a.csv", _csv(_small_records())), ("b.csv", _csv(_small_records()))])


def test_read_uploads_uses_only_the_base_name_and_reads_parquet(tmp_path):
    buffer = io.BytesIO()
    _small_records().to_parquet(buffer, index=False)
    result = read_uploads([("../../etc/cache.parquet", buffer.getvalue())])
    assert result.source == "cache.parquet"
    assert len(result.records) == 3


def test_read_uploads_imports_a_zipped_folder():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("run/one.csv", _small_records().to_csv(index=False))
    result = read_uploads([("caches.zip", buffer.getvalue())])
    assert len(result.records) == 3


def test_read_uploads_rejects_a_zip_entry_outside_the_archive():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../escape.csv", _small_records().to_csv(index=False))
    with pytest.raises(RecordsError, match="outside"):
        read_uploads([("evil.zip", buffer.getvalue())])


def test_read_uploads_unreadable_file_is_a_records_error():
    with pytest.raises(RecordsError, match=r"^notes\.txt: cannot tell the format"):
        read_uploads([("notes.txt", b"hello")])


# ---------------------------------------------------------------------- overview


def test_model_order_by_name_family_and_score():
    cells = _cells()
    assert views.model_order(cells, "model") == ["a/y", "b/x", "c/z"]
    assert views.model_order(cells, "family") == ["a/y", "b/x", "c/z"]
    # mean sample score: a/y 0.5, b/x 0.3, c/z 0.9
    assert views.model_order(cells, "score") == ["c/z", "a/y", "b/x"]
    # in t1 only a/y (0.5) and b/x (0.2) have scores; c/z comes last
    assert views.model_order(cells, "score", task="t1") == ["a/y", "b/x", "c/z"]
    with pytest.raises(ValueError, match="order must be"):
        views.model_order(cells, "size")


def test_model_order_by_family_groups_families():
    cells = pd.DataFrame(
        {
            "model": ["a1", "b1", "a2"],
            "task": ["t"] * 3,
            "family": ["z", "y", "z"],
            "n_responses": [1, 1, 1],
            "sample_score": [0.1, 0.2, 0.3],
            "reference": [0.1, 0.2, 0.3],
        }
    )
    assert views.model_order(cells, "family") == ["b1", "a1", "a2"]


def test_coverage_matrix_marks_missing_cells():
    matrix = views.coverage_matrix(_cells(), ["b/x", "a/y", "c/z"])
    assert list(matrix.index) == ["b/x", "a/y", "c/z"]
    assert list(matrix.columns) == ["t1", "t2"]
    assert matrix.loc["a/y", "t1"] == 2
    assert np.isnan(matrix.loc["a/y", "t2"])
    assert np.isnan(matrix.loc["c/z", "t1"])


def test_family_coverage_is_the_share_of_models():
    cells = _cells()
    cells.loc[cells["model"] == "c/z", "family"] = "a"
    fraction = views.family_coverage(cells)
    # family a = {a/y (t1), c/z (t2)}
    assert fraction.loc["a", "t1"] == 0.5
    assert fraction.loc["a", "t2"] == 0.5
    assert fraction.loc["b", "t1"] == 1.0


def test_paginate_clips_the_page():
    items = list(range(205))
    assert views.paginate(items, 1, 100) == (list(range(100)), 3)
    assert views.paginate(items, 3, 100) == ([200, 201, 202, 203, 204], 3)
    assert views.paginate(items, 9, 100)[0] == [200, 201, 202, 203, 204]
    assert views.paginate([], 1, 100) == ([], 1)


def test_pairedness_matrix_from_the_store():
    records = pd.DataFrame(
        {
            "model": ["a", "a", "b", "c"],
            "task": ["t", "t", "t", "u"],
            "query_id": ["1", "2", "1", "9"],
            "score": [1.0, 0.0, 1.0, 0.5],
        }
    )
    with Store(":memory:") as store:
        store.ingest(records)
        pooled = store.pairedness()
        in_t = store.pairedness("t")
    matrix = views.pairedness_matrix(pooled, ["a", "b", "c"])
    assert matrix.loc["a", "b"] == 0.5
    assert matrix.loc["b", "a"] == 1.0
    assert matrix.loc["a", "c"] == 0.0
    assert matrix.loc["c", "c"] == 1.0
    in_task = views.pairedness_matrix(in_t, ["a", "b", "c"])
    assert np.isnan(in_task.loc["c", "a"])
    families = views.family_pairedness(pooled, pd.Series({"a": "f", "b": "f", "c": "g"}))
    assert families.loc["f", "f"] == pytest.approx(0.75)
    assert families.loc["f", "g"] == 0.0


# ---------------------------------------------------------------------- space


@pytest.fixture(scope="module")
def fitted():
    cache = make_synthetic(n_models=12, n_tasks=4, budget=3, rho=0.0, p_task=0.7, random_state=3)
    space = PerspectiveSpace(query_bandwidth="cv", n_components=4).fit(cache.records)
    return cache.records, space


def test_summarize_space_keeps_what_the_page_shows(fitted):
    records, space = fitted
    summary = views.summarize_space(space)
    assert list(summary.models) == list(space.models_)
    np.testing.assert_array_equal(summary.distance, space.distance_matrix_)
    curve = summary.cv_curve()
    assert curve["chosen"].sum() == 1
    assert curve.loc[curve["chosen"], "bandwidth"].item() == space.query_bandwidth_
    assert curve["multiple_of_median"].iloc[1:].round(6).tolist() == [0.03, 0.1, 0.3, 1.0, 3.0]


def test_scatter_frame_scores_come_from_the_task(fitted):
    records, space = fitted
    cells = cell_table(validate_records(records))
    summary = views.summarize_space(space)
    task = cells["task"].iloc[0]
    frame = views.scatter_frame(summary, cells, task)
    in_task = cells[cells["task"] == task].set_index("model")
    row = frame.set_index("model").loc[in_task.index[0]]
    assert row["score"] == in_task["reference"].iloc[0]
    assert row["task_responses"] == in_task["n_responses"].iloc[0]
    absent = sorted(set(summary.models) - set(in_task.index))
    assert absent, "the fixture leaves some models out of the task"
    assert frame.set_index("model").loc[absent, "score"].isna().all()
    np.testing.assert_allclose(frame["x"], summary.coordinates["dim_1"])


def test_selected_models_reads_customdata_not_point_order():
    selection = {
        "points": [
            {"point_index": 0, "customdata": ["m7", "fam"]},
            {"point_index": 3, "customdata": ["m2", "fam"]},
            {"point_index": 4},
        ]
    }
    other = {"points": [{"point_index": 0, "customdata": ["m2", "fam"]}]}
    assert views.selected_models(selection, other, None) == ["m7", "m2"]


def test_nearest_neighbours_ranks_by_distance():
    distance = np.array([[0, 3, 1, 2], [3, 0, 5, 4], [1, 5, 0, 9], [2, 4, 9, 0]], dtype=float)
    table = views.nearest_neighbours(distance, ["a", "b", "c", "d"], ["a", "x", "b"], k=2)
    assert table[table["model"] == "a"]["neighbour"].tolist() == ["c", "d"]
    assert table[table["model"] == "b"]["neighbour"].tolist() == ["a", "d"]
    assert table["rank"].tolist() == [1, 2, 1, 2]
    assert "x" not in set(table["model"])


def test_nearest_neighbours_at_one_distance_are_ordered_by_the_coordinates():
    # a thin model whose D to three references clipped at 0: D cannot order them, the MDS
    # coordinates the KNN reads can; without coordinates the ties fall back to the names
    distance = np.array(
        [[0, 0, 0, 0, 2], [0, 0, 1, 1, 2], [0, 1, 0, 1, 2], [0, 1, 1, 0, 2], [2, 2, 2, 2, 0]],
        dtype=float,
    )
    models = ["new", "a", "b", "c", "far"]
    coordinates = np.array([[0.0, 0], [0.9, 0], [0.1, 0], [0.5, 0], [3.0, 0]])
    placed = views.nearest_neighbours(distance, models, ["new"], k=4, coordinates=coordinates)
    assert placed["neighbour"].tolist() == ["b", "c", "a", "far"]
    assert placed["distance"].tolist() == [0, 0, 0, 2]
    by_name = views.nearest_neighbours(distance, models, ["new"], k=4)
    assert by_name["neighbour"].tolist() == ["a", "b", "c", "far"]


def test_similar_query_responses_finds_the_closest_query():
    records = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "task": ["t"] * 4,
            "query_id": ["1", "2", "3", "4"],
            "query": ["q1", "q2", "q3", "q4"],
            "response": ["ra1", "ra2", "rb3", "rb4"],
            "score": [1.0, 0.0, 0.5, 0.25],
            "query_embedding": [
                np.array([1.0, 0.0]),
                np.array([0.0, 1.0]),
                np.array([0.9, 0.1]),
                np.array([-1.0, 0.0]),
            ],
        }
    )
    table = views.similar_query_responses(records, "a", ["b"], n=1)
    assert len(table) == 1
    assert table.iloc[0]["query"] == "q1"
    assert table.iloc[0]["neighbour_query"] == "q3"
    assert table.iloc[0]["neighbour_response"] == "rb3"
    assert table.iloc[0]["similarity"] == pytest.approx(0.9 / np.hypot(0.9, 0.1))


def test_similar_query_responses_without_embeddings_matches_identical_queries():
    records = _small_records()
    table = views.similar_query_responses(records, "m1", ["m2"], n=5)
    assert table["query"].isna().all()
    assert len(table) == 1
    assert table.iloc[0]["response"] == "yes"
    assert table.iloc[0]["neighbour_response"] == "yes"
    assert table.iloc[0]["similarity"] == 1.0


@pytest.mark.slow
def test_umap_2d_gives_two_columns_when_installed(fitted):
    pytest.importorskip("umap")
    _, space = fitted
    xy = views.umap_2d(space.embedding_)
    assert xy.shape == (len(space.models_), 2)
    assert np.isfinite(xy).all()


@pytest.mark.slow
def test_umap_2d_keeps_separated_groups_apart():
    # the neighbours handed to UMAP are the exact ones: each point's nearest neighbour in
    # the 2-D view is in its own group when the groups are far apart in d dimensions
    pytest.importorskip("umap")
    rng = np.random.default_rng(3)
    groups = np.repeat([0, 1, 2], 15)
    coordinates = rng.normal(size=(45, 5)) + 12.0 * np.eye(5)[groups]
    xy = views.umap_2d(coordinates)
    distances = np.linalg.norm(xy[:, None] - xy[None, :], axis=-1)
    np.fill_diagonal(distances, np.inf)
    assert (groups[distances.argmin(axis=1)] == groups).all()
    np.testing.assert_array_equal(views.umap_2d(coordinates), xy)  # seeded


def test_umap_2d_raises_import_error_without_the_package(monkeypatch, fitted):
    monkeypatch.setitem(sys.modules, "umap", None)
    with pytest.raises(ImportError):
        views.umap_2d(fitted[1].embedding_)


# ---------------------------------------------------------------------- predictions


@pytest.fixture(scope="module")
def predictions():
    cache = make_synthetic(n_models=14, n_tasks=4, budget=3, rho=0.0, p_task=0.7, random_state=5)
    return predict(cache.records, ["sample", "dkps", "pkps"], holdout="family")


def test_mae_table_matches_a_direct_computation(predictions):
    table = views.mae_table(predictions)
    assert list(table.index) == ["sample", "dkps", "pkps"]
    pkps = predictions[predictions["method"] == "pkps"].dropna(
        subset=["prediction", "reference_score"]
    )
    expected = (pkps["prediction"] - pkps["reference_score"]).abs().mean()
    assert table.loc["pkps", "MAE"] == pytest.approx(expected)
    assert table.loc["pkps", "cells_scored"] == len(pkps)
    assert table.loc["sample", "cells_predicted"] < table.loc["sample", "cells"]


def test_mae_table_restricted_to_models(predictions):
    models = sorted(predictions["model"].unique())[:2]
    table = views.mae_table(predictions, models)
    assert table["cells"].eq(2 * predictions["task"].nunique()).all()


def test_per_task_mae_averages_to_the_cells(predictions):
    by_task = views.per_task_mae(predictions)
    assert list(by_task.columns) == ["sample", "dkps", "pkps"]
    assert sorted(by_task.index) == sorted(predictions["task"].unique())
    one = predictions[(predictions["method"] == "dkps") & (predictions["task"] == by_task.index[0])]
    one = one.dropna(subset=["prediction", "reference_score"])
    assert by_task.iloc[0]["dkps"] == pytest.approx(
        (one["prediction"] - one["reference_score"]).abs().mean()
    )


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_export_round_trips_with_the_cli_columns(predictions, file_format):
    target = predictions["model"].iloc[0]
    exported = views.prediction_export(
        predictions.assign(extra=1),
        targets=[target],
        settings={"holdout": "family", "budget": 4},
    )
    data = views.export_bytes(exported, file_format)
    reader = pd.read_csv if file_format == "csv" else pd.read_parquet
    back = reader(io.BytesIO(data))
    assert tuple(back.columns) == (*OUTPUT_COLUMNS, "target", "holdout", "budget")
    assert back["target"].tolist() == (back["model"] == target).tolist()
    assert (back["holdout"] == "family").all() and (back["budget"] == 4).all()
    assert len(back) == len(predictions)
    np.testing.assert_allclose(back["prediction"], predictions["prediction"])
    with pytest.raises(ValueError, match="csv"):
        views.export_bytes(exported, "xlsx")


def test_coordinates_export_stacks_spaces(fitted):
    _, space = fitted
    summary = views.summarize_space(space)
    frame = views.coordinates_export({"pkps": summary, "dkps": summary})
    assert frame.columns[:3].tolist() == ["space", "model", "family"]
    assert frame["space"].value_counts().to_dict() == {"pkps": 12, "dkps": 12}


def test_the_mae_caption_says_what_the_reference_is():
    rows = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "task": ["t"] * 4,
            "query_id": ["q1", "q2", "q1", "q2"],
            "score": [1.0, 0.0, 0.0, 0.0],
        }
    )
    rows = validate_records(rows)
    assert views.reference_is_sample_score(cell_table(rows))
    assert not views.reference_is_sample_score(cell_table(rows.assign(reference_score=0.4)))
    without = views.mae_caption(self_reference=True, budget=None)
    assert "sample score" in without and "not judged" in without
    given = views.mae_caption(self_reference=False, budget=None)
    assert given.startswith("MAE against reference_score") and "not judged" not in given
    targets = views.mae_caption(self_reference=False, budget=4)
    assert "full-data score" in targets and "at most 4" in targets
    assert all("plain mean over cells" in c for c in (without, given, targets))
