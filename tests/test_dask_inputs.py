"""Reading and embedding a Parquet dataset on a LocalCluster (pkps_core.space.dask_inputs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from dask_cluster import local_cluster

from pkps_core.embed import TfidfSvdEmbedder, embed_records
from pkps_core.records import RecordsError
from pkps_core.store.parquet import export_parquet, read_parquet_dataset
from pkps_core.synthetic import make_synthetic

distributed = pytest.importorskip("distributed")
from pkps_core.space.dask_inputs import (  # noqa: E402
    read_dataset_on_cluster,
    smallest_hashes,
)

KEYS = ["task", "model", "query_id"]


@pytest.fixture(scope="module")
def client():
    with local_cluster() as session:
        yield session


@pytest.fixture(scope="module")
def texts():
    records = make_synthetic(n_models=12, n_tasks=3, budget=6, random_state=3).records
    words = np.array(["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "tau"])
    rng = np.random.default_rng(0)
    records = records.drop(columns=["query_embedding", "response_embedding"], errors="ignore")
    records["response"] = [" ".join(rng.choice(words, 5)) for _ in range(len(records))]
    codes = pd.factorize(records["query_id"])[0]
    records["query"] = [
        f"question {t} {q} {words[c % 8]}"
        for t, q, c in zip(records["task"], records["query_id"], codes, strict=True)
    ]
    return records


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(KEYS).reset_index(drop=True)


def test_reads_and_embeds_like_the_local_path(client, texts, tmp_path):
    export_parquet(texts, tmp_path / "ds")
    steps = []
    remote = _sorted(
        read_dataset_on_cluster(tmp_path / "ds", client, progress=lambda *a: steps.append(a))
    )
    local = _sorted(embed_records(read_parquet_dataset(tmp_path / "ds")))
    assert len(remote) == len(texts)
    assert [s[0] for s in steps] == [1, 2, 3, 4]
    for column in ("score", "response", "query"):
        assert remote[column].tolist() == local[column].tolist()
    for column in ("response_embedding", "query_embedding"):
        np.testing.assert_allclose(
            np.stack(remote[column]), np.stack(local[column]), atol=1e-9, rtol=0
        )


def test_a_sample_fits_once_and_every_file_uses_that_fit(client, texts, tmp_path):
    export_parquet(texts, tmp_path / "ds")
    remote = _sorted(read_dataset_on_cluster(tmp_path / "ds", client, sample_texts=20))
    distinct = sorted(set(texts["response"]))
    assert len(distinct) > 20
    # the sample is the 20 distinct texts of smallest hash over the whole dataset
    sample = sorted(t for _, t in smallest_hashes(texts, "response", 20))
    fitted = TfidfSvdEmbedder().fit(sample)
    expected = fitted.transform(remote["response"].tolist())
    np.testing.assert_allclose(np.stack(remote["response_embedding"]), expected, atol=1e-12)


def test_given_embeddings_are_kept(client, texts, tmp_path):
    embedded = embed_records(texts)
    export_parquet(embedded, tmp_path / "ds")
    remote = _sorted(read_dataset_on_cluster(tmp_path / "ds", client))
    np.testing.assert_array_equal(
        np.stack(remote["response_embedding"]), np.stack(_sorted(embedded)["response_embedding"])
    )


def test_not_a_dataset_is_one_line(client, tmp_path):
    with pytest.raises(RecordsError, match="is not a Parquet dataset"):
        read_dataset_on_cluster(tmp_path, client)
