"""The Dask engine against the local one: same paths, same D, bandwidth and predictions.

One ``distributed.LocalCluster`` (2 worker processes × 1 thread, a memory limit per
worker) serves the module and is closed by its fixture.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cli_in_process import run_in_process
from dask_cluster import WORKER_MEMORY, local_cluster

from bench.caches import make_bench_records
from pkps_core.predict import predict
from pkps_core.space import PerspectiveSpace, kernels
from pkps_core.space.affinity import AffinityEngine
from pkps_core.space.runtime import peak_rss_bytes, reset_peak_rss
from pkps_core.synthetic import make_synthetic

distributed = pytest.importorskip("distributed")

SMALL_BLOCKS = 1 << 16  # several model and query blocks even on small caches


@pytest.fixture(scope="module")
def client():
    with local_cluster() as client:
        yield client


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic(n_models=16, n_tasks=4, budget=5, rho=0.4, random_state=3).records


@pytest.fixture(scope="module")
def many_queries():
    # 45 models × 16 tasks × 32 queries from pools of 128: 2048 unique queries, so the
    # local engine tries Nyström on wide bandwidths and the sparse path on narrow ones
    return make_bench_records("M", "unpaired", seed=1)


def _assert_same_fit(local, remote):
    assert [r.path for r in remote.affinity_reports_] == [r.path for r in local.affinity_reports_]
    assert [r.rank for r in remote.affinity_reports_] == [r.rank for r in local.affinity_reports_]
    scale = max(1.0, float(local.distance_matrix_.max()))
    for a, b in zip(local.kernel_sums_, remote.kernel_sums_, strict=True):
        d_local = kernels.distance_from_affinity(kernels.affinity_from_sums(a)[0])[0]
        d_remote = kernels.distance_from_affinity(kernels.affinity_from_sums(b)[0])[0]
        assert np.abs(d_local - d_remote).max() <= 1e-9 * scale
    assert remote.query_bandwidth_ == pytest.approx(local.query_bandwidth_, rel=1e-12)
    np.testing.assert_allclose(remote.cv_errors_, local.cv_errors_, rtol=1e-9, atol=1e-12)
    assert np.abs(remote.distance_matrix_ - local.distance_matrix_).max() <= 1e-9 * scale
    assert list(remote.models_) == list(local.models_)


@pytest.mark.parametrize(
    "params",
    [
        {"query_kernel": "rbf", "response_kernel": "linear"},
        {"query_kernel": "rbf", "response_kernel": "cosine", "self_pairs": "exclude"},
        {"query_kernel": "rbf", "response_kernel": "rbf"},
        {"query_kernel": "delta", "response_kernel": "linear"},
        {"query_kernel": "delta", "response_kernel": "cosine"},
        {"query_kernel": "delta", "response_kernel": "rbf"},
    ],
    ids=lambda p: f"{p['query_kernel']}-{p['response_kernel']}",
)
def test_every_kernel_pair_matches_the_local_engine(client, synthetic, params):
    options = {"block_bytes": SMALL_BLOCKS, **params}
    local = PerspectiveSpace(**options).fit(synthetic)
    remote = PerspectiveSpace(engine="dask", client=client, **options).fit(synthetic)
    _assert_same_fit(local, remote)


@pytest.mark.slow
def test_every_path_matches_the_local_engine(client, many_queries):
    options = {"response_components": 16, "block_bytes": 1 << 21}
    local = PerspectiveSpace(**options).fit(many_queries)
    paths = {r.path for r in local.affinity_reports_}
    assert {"exact", "sparse", "nystrom"} <= paths, [r.path for r in local.affinity_reports_]
    remote = PerspectiveSpace(engine="dask", client=client, **options).fit(many_queries)
    _assert_same_fit(local, remote)


def _unpaired_arrays(seed=7, n=12, per_model=100, n_q=600):
    rng = np.random.default_rng(seed)
    chosen = np.sort(np.argsort(rng.random((n, n_q)), axis=1)[:, :per_model], axis=1)
    layout = kernels.ResponseLayout.build(
        np.repeat(np.arange(n), per_model), chosen.ravel(), n, n_q
    )
    queries = rng.standard_normal((n_q, 6))
    features = rng.standard_normal((n * per_model, 5))
    sq = kernels.squared_distances(queries)
    return layout, features, queries, float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))


def _assert_same_sums(a, b, rtol=1e-9):
    scale = max(1.0, float(np.abs(a.numerator).max()), float(np.abs(a.denominator).max()))
    np.testing.assert_allclose(b.numerator, a.numerator, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(b.denominator, a.denominator, rtol=rtol, atol=rtol * scale)
    d_a = kernels.distance_from_affinity(kernels.affinity_from_sums(a)[0])[0]
    d_b = kernels.distance_from_affinity(kernels.affinity_from_sums(b)[0])[0]
    assert np.abs(d_a - d_b).max() <= 1e-9 * max(1.0, float(d_a.max()))


@pytest.mark.parametrize(
    ("path", "response_kernel", "multiple"),
    [
        ("exact", "linear", 1.0),
        ("sparse", "linear", 0.03),
        ("nystrom", "linear", 3.0),
        ("exact", "linear", 0.0),  # delta
        ("exact", "rbf", 1.0),  # the pairwise sums
        ("exact", "rbf", 0.0),
        ("exact", "cosine", 0.3),
    ],
    ids=lambda v: str(v),
)
def test_every_path_matches_the_local_engine_sum_for_sum(client, path, response_kernel, multiple):
    from pkps_core.space.dask_engine import dask_backend

    layout, features, queries, median = _unpaired_arrays()
    bandwidth = multiple * median
    options = {"affinity_path": path, "block_bytes": 1 << 15, "response_kernel": response_kernel}
    local = AffinityEngine(layout, features, queries, **options)
    with AffinityEngine(
        layout, features, queries, backend=dask_backend(client), **options
    ) as remote:
        a, b = local.sums(bandwidth), remote.sums(bandwidth)
        got = [(r.path, r.rank, r.error_kind) for r in remote.reports]
        assert got == [(r.path, r.rank, r.error_kind) for r in local.reports]
        assert remote.reports[-1].error == pytest.approx(local.reports[-1].error, rel=1e-9)
        assert local.reports[-1].path == path
        assert remote.backend.task_counts["tile"] > 1
    _assert_same_sums(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_one_pass_over_the_grid_gives_the_sums_of_one_pass_per_bandwidth(
    client, many_queries, engine
):
    """The grid decided in lockstep (the exact bandwidths and the approximations in one
    pass) against each bandwidth on its own: same paths, same sums; and the Dask grid
    equals the local."""
    from pkps_core.space.dask_engine import dask_backend

    space = PerspectiveSpace(response_components=16).fit(many_queries)
    prepared, grid = space.prepared_, space.bandwidth_grid_
    arrays = (prepared.layout, space.features_, space.query_vectors_)
    backend = dask_backend(client) if engine == "dask" else None
    with AffinityEngine(*arrays, block_bytes=1 << 21, backend=backend) as together:
        passes, sums = [], together.backend.sums
        together.backend.sums = lambda kernels, factors: (
            passes.append((len(kernels), len(factors))) or sums(kernels, factors)
        )
        at_once = together.grid_sums(grid)
    # one pass: every exact and sparse kernel and the Nyström factor, after the counts
    assert passes == [(len(grid) - 1, 1)]
    one_by_one = []
    for bandwidth in grid:
        with AffinityEngine(*arrays, block_bytes=1 << 21, backend=backend) as alone:
            one_by_one.append((alone.sums(bandwidth), alone.reports[-1]))
    assert {r.path for r in together.reports} >= {"exact", "sparse", "nystrom"}
    assert [(r.path, r.rank) for r in together.reports] == [(r.path, r.rank) for _, r in one_by_one]
    for a, (b, _) in zip(at_once, one_by_one, strict=True):
        _assert_same_sums(b, a, rtol=1e-12)
    local = AffinityEngine(*arrays, block_bytes=1 << 21).grid_sums(grid)
    for a, b in zip(local, at_once, strict=True):
        _assert_same_sums(a, b)


def test_runs_of_models_when_the_queries_run_out(client, monkeypatch):
    """Few unique queries for many tasks: a column block's share of a pass is cut into
    runs of its models as well (each task's rows end at its last model)."""
    from pkps_core.space import dask_engine, dask_tasks
    from pkps_core.space.dask_engine import dask_backend

    monkeypatch.setattr(dask_tasks, "MIN_QUERY_SPAN", 10_000)  # one query piece
    monkeypatch.setattr(dask_engine, "TASKS_PER_THREAD", 3)
    monkeypatch.setattr(dask_engine, "MIN_TASK_FLOPS", 1)
    layout, features, queries, median = _unpaired_arrays(seed=2, n=9, per_model=40, n_q=90)
    grid = [0.0, 0.3 * median, median]
    local = AffinityEngine(layout, features, queries, affinity_path="exact").grid_sums(grid)
    with AffinityEngine(
        layout, features, queries, affinity_path="exact", backend=dask_backend(client)
    ) as remote:
        got = remote.grid_sums(grid)
        assert remote.backend.task_counts["tile"] == 6  # 2 workers × 3, one piece each
    for a, b in zip(local, got, strict=True):
        _assert_same_sums(a, b)


def test_one_column_block_is_read_by_every_task_without_query_pieces(client, monkeypatch):
    """A cache whose responses fit one block: the block goes to every worker and each
    task takes its rows (its run of queries) from it; no query pieces are scattered."""
    from pkps_core.space import dask_engine
    from pkps_core.space.dask_engine import dask_backend

    monkeypatch.setattr(dask_engine, "MIN_TASK_FLOPS", 1)
    layout, features, queries, median = _unpaired_arrays(seed=3)
    grid = [0.0, 0.03 * median, median, 3.0 * median]
    local = AffinityEngine(layout, features, queries, block_bytes=1 << 15)
    expected = local.grid_sums(grid)
    with AffinityEngine(layout, features, queries, backend=dask_backend(client)) as remote:
        got = remote.grid_sums(grid)
        blocks, _ = remote.backend._columns
        assert len(blocks) == 1 and remote.backend._pieces is None
        # runs of queries, one per task (2 workers × TASKS_PER_THREAD), none of the models
        assert remote.backend.task_counts["tile"] == 2 * dask_engine.TASKS_PER_THREAD
        # the block (counted once, sent to both workers) and the query vectors
        assert remote.backend.bytes_moved["scattered"] == blocks[0].nbytes + queries.nbytes
    assert [r.path for r in remote.reports] == [r.path for r in local.reports]
    for a, b in zip(expected, got, strict=True):
        _assert_same_sums(a, b)


def test_update_on_the_cluster_equals_the_local_update(client, synthetic):
    first = synthetic[synthetic.model != synthetic.model.iloc[-1]]
    later = synthetic[synthetic.model == synthetic.model.iloc[-1]]
    local = PerspectiveSpace(block_bytes=SMALL_BLOCKS).fit(first).update(later)
    remote = PerspectiveSpace(engine="dask", client=client, block_bytes=SMALL_BLOCKS)
    _assert_same_fit(local, remote.fit(first).update(later))


def test_predictions_match_the_local_engine(client, synthetic):
    local = predict(synthetic, ["pkps", "dkps"], space_params={"random_state": 0})
    remote = predict(
        synthetic,
        ["pkps", "dkps"],
        space_params={"random_state": 0, "engine": "dask", "client": client},
    )
    keys = ["method", "model", "task"]
    local, remote = local.sort_values(keys), remote.sort_values(keys)
    np.testing.assert_allclose(
        remote["prediction"].to_numpy(), local["prediction"].to_numpy(), atol=1e-9
    )


@pytest.mark.slow
def test_workers_stay_under_their_memory_limit(many_queries):
    # workers of their own, their peaks (VmHWM) reset before the fit: the module's cluster
    # has run other fits (with the default, larger blocks) before this one, and a spawned
    # worker's ru_maxrss carries the size of the pytest process it was forked from
    with local_cluster() as client:
        client.run(reset_peak_rss)
        PerspectiveSpace(engine="dask", client=client, block_bytes=1 << 22).fit(many_queries)
        peaks = client.run(peak_rss_bytes)
    assert len(peaks) == 2
    assert max(peaks.values()) < WORKER_MEMORY


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line(synthetic, monkeypatch):
    monkeypatch.setenv("PKPS_DASK_CONNECT_TIMEOUT", "1s")  # (10 s by default)
    space = PerspectiveSpace(engine="dask", client="tcp://127.0.0.1:9")
    with pytest.raises(ValueError, match=r"cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        space.fit(synthetic)


def test_library_fits_without_dask():
    script = textwrap.dedent(
        """
        import sys
        for name in ("dask", "distributed"):
            sys.modules[name] = None  # import fails as if not installed
        import pkps_core
        from pkps_core.space import PerspectiveSpace
        from pkps_core.synthetic import make_synthetic
        records = make_synthetic(n_models=8, n_tasks=3, budget=3, random_state=0).records
        space = PerspectiveSpace().fit(records)
        assert space.distance_matrix_.shape == (8, 8)
        try:
            PerspectiveSpace(engine="dask").fit(records)
        except ValueError as exc:
            assert "pip install" in str(exc), exc
        else:
            raise AssertionError("engine='dask' fitted without dask")
        assert not any(k.startswith(("dask", "distributed")) and sys.modules[k]
                       for k in list(sys.modules))
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _cli(*args, env=None):
    """The command asked in this process (tests/cli_in_process.py: the same cli.main)."""
    return run_in_process(*args, env=env)


@pytest.mark.slow
def test_cli_predict_on_the_cluster_from_a_parquet_dataset(client, synthetic, tmp_path):
    from pkps_core.store import Store

    with Store(tmp_path / "cache.duckdb") as store:
        store.ingest(synthetic, source="synthetic")
    dataset = tmp_path / "dataset"
    done = _cli("export", "--db", str(tmp_path / "cache.duckdb"), "--to-parquet", str(dataset))
    assert done.returncode == 0, done.stderr
    assert {p.name for p in dataset.iterdir()} == {f"task={t}" for t in synthetic.task.unique()}
    common = ["--methods", "pkps", "--no-interval"]
    local = _cli("predict", "--input", str(dataset), "--out", str(tmp_path / "l.csv"), *common)
    assert local.returncode == 0, local.stderr
    address = client.scheduler.address
    remote = _cli(
        "predict", "--input", str(dataset), "--out", str(tmp_path / "r.csv"), *common,
        "--engine", "dask", env={"PKPS_DASK_SCHEDULER": address},
    )  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    assert f"worker(s) at {address}" in remote.stderr and "tasks:" in remote.stderr
    assert "read and embedded" in remote.stderr  # the dataset was read on the workers
    import pandas as pd

    keys = ["method", "model", "task"]
    a = pd.read_csv(tmp_path / "l.csv").sort_values(keys)
    b = pd.read_csv(tmp_path / "r.csv").sort_values(keys)
    np.testing.assert_allclose(b["prediction"], a["prediction"], atol=1e-9)


@pytest.mark.slow
def test_cli_refuses_bad_scheduler_and_non_dataset_in_one_line(tmp_path, synthetic):
    cache = tmp_path / "cache.csv"
    synthetic.drop(columns=["query_embedding", "response_embedding"]).to_csv(cache, index=False)
    bad = _cli(
        "predict", "--input", str(cache), "--out", str(tmp_path / "o.csv"),
        "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9",
        env={"PKPS_DASK_CONNECT_TIMEOUT": "1s"},
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in bad.stderr
    empty = tmp_path / "not_a_dataset"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    refused = _cli("predict", "--input", str(empty), "--out", str(tmp_path / "o.csv"))
    assert refused.returncode == 2
    assert "is not a Parquet dataset" in refused.stderr
    assert refused.stderr.strip().count("\n") == 0


def test_each_worker_thread_is_warmed_while_the_data_travel(client):
    """A fit's first step on the cluster: one warm-up per worker thread, on that worker,
    leaving a touched buffer big enough for any tile of the fit in its idle list (so the
    first tile pays no page faults) — and the same sums as without it."""
    from pkps_core.space import runtime
    from pkps_core.space.dask_engine import dask_backend

    client.run(runtime.release_buffers)
    layout, features, queries, median = _unpaired_arrays(seed=4)
    grid = [0.0, median]
    block_bytes = 1 << 20
    local = AffinityEngine(layout, features, queries, block_bytes=block_bytes).grid_sums(grid)
    with AffinityEngine(
        layout, features, queries, block_bytes=block_bytes, backend=dask_backend(client)
    ) as remote:
        got = remote.grid_sums(grid)
        threads = sum(client.nthreads().values())
        assert remote.backend.task_counts["warm"] == threads
        assert all(f.status == "finished" for f in remote.backend._warming)
    idle = client.run(lambda: [b.size for b in runtime._IDLE_BUFFERS])
    assert len(idle) == len(client.nthreads())
    assert all(max(sizes) >= block_bytes // 8 for sizes in idle.values())
    for a, b in zip(local, got, strict=True):
        _assert_same_sums(a, b)
