"""The reference predictor kept in the store: read back, never stale, never half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from pkps_core.predictor import StaleFit, stored_predictor
from pkps_core.store import Store
from pkps_core.store.fits import fit_status, load_fit, save_fit
from pkps_core.synthetic import make_synthetic

SETTINGS = {"budgets": (4,), "modes": ("scored",)}


@pytest.fixture()
def store_and_new(tmp_path):
    records = make_synthetic(
        n_models=24, n_tasks=3, budget=16, rho=1.0, random_state=5, family_size=3
    ).records
    new_model = sorted(records["model"].unique())[7]
    references = records[records["model"] != new_model]
    thin = records[records["model"] == new_model].groupby("task").head(4)
    path = tmp_path / "store.duckdb"
    with Store(path) as store:
        store.ingest(references, source="references")
    return path, thin


def test_a_kept_fit_is_read_back_and_predicts_the_same(store_and_new):
    path, thin = store_and_new
    with Store(path) as store:
        first = stored_predictor(store, **SETTINGS)
        expected = first.predict(thin)
    with Store(path, read_only=True) as store:
        again = stored_predictor(store, fit="never", **SETTINGS)
        got = again.predict(thin)
    np.testing.assert_allclose(got["prediction"], expected["prediction"], atol=1e-12)
    np.testing.assert_allclose(got["upper"], expected["upper"], atol=1e-12)


def test_a_store_edited_after_its_fit_never_serves_the_old_fit(store_and_new):
    path, thin = store_and_new
    with Store(path) as store:
        before = stored_predictor(store, **SETTINGS)
        store.ingest(thin.assign(model="late reference", family="late"), source="late")
        with pytest.raises(StaleFit, match="fit"):
            stored_predictor(store, fit="never", **SETTINGS)
        after = stored_predictor(store, **SETTINGS)  # refits
    assert "late reference" in set(after.references_)
    assert "late reference" not in set(before.references_)
    with Store(path) as store:
        from pkps_core.predictor import FIT_KIND, ReferencePredictor
        from pkps_core.store.fits import fit_key

        key = fit_key(FIT_KIND, ReferencePredictor(**SETTINGS).settings())
        assert fit_status(store, key) == "current"


def test_a_fit_is_kept_with_the_embedders_its_records_were_read_with(tmp_path, monkeypatch):
    # the embedders refitted (by another process) while a fit runs: the kept fit says
    # which embedders its records came from (the first read fits them), so it reads as
    # stale, never as current
    from pkps_core.predictor import FIT_KIND, ReferencePredictor
    from pkps_core.store import fits
    from pkps_core.store.fits import fit_key

    records = make_synthetic(n_models=12, n_tasks=2, budget=6, random_state=2).records
    records = records.drop(columns=["query_embedding", "response_embedding"], errors="ignore")
    records["query"] = "question " + records["query_id"].astype(str) + " of " + records["task"]
    records["response"] = "answer of " + records["model"] + " to " + records["query"]
    path = tmp_path / "texts.duckdb"
    digests = []
    counted = fits.embedders_digest
    monkeypatch.setattr(fits, "embedders_digest", lambda s: digests.append(1) or counted(s))
    with Store(path) as store:
        store.ingest(records, source="texts")
        fitting = ReferencePredictor.fit

        def refit_embedders_then_fit(self, *args, **kwargs):
            with store._cursor() as cur:  # the embedders change while the fit runs
                cur.execute("UPDATE embedders SET state = state || '\\x00'::BLOB")
            return fitting(self, *args, **kwargs)

        key = fit_key(FIT_KIND, ReferencePredictor(**SETTINGS).settings())
        stored_predictor(store, fit="always", **SETTINGS)
        assert len(digests) == 1  # a forced fit reads it once, after the records
        assert fit_status(store, key) == "current"  # its first read fitted the embedders
        monkeypatch.setattr(ReferencePredictor, "fit", refit_embedders_then_fit)
        stored_predictor(store, fit="always", **SETTINGS)
        assert fit_status(store, key) == "stale"


def test_fitted_state_holds_no_objects(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(Exception, match="only numbers and text"):
            save_fit(store, "k", {}, {"bad": np.array([{"a": 1}], dtype=object)}, 0)


WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pkps_core.store import Store
    from pkps_core.store.fits import save_fit

    path = sys.argv[1]
    with Store(path) as store:
        k = 0
        while True:
            k += 1
            value = float(k)
            arrays = {f"a{i}": np.full((200, 200), value) for i in range(40)}
            save_fit(store, "key", {"value": value}, arrays, 0)
            print(k, flush=True)
    """
)


@pytest.mark.slow
def test_a_kill_during_the_write_leaves_the_old_fit_or_the_new_one(tmp_path):
    path = tmp_path / "store.duckdb"
    with Store(path) as store:
        save_fit(
            store, "key", {"value": 0.0}, {f"a{i}": np.zeros((200, 200)) for i in range(40)}, 0
        )
    values = []
    for delay in (0.05, 0.3, 0.7):
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        process.stdout.readline()  # one save has committed: the next ones overwrite it
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        with Store(path, read_only=True) as store:
            found = load_fit(store, "key")
        value = found.document["value"]
        values.append(value)
        assert len(found.arrays) == 40
        for array in found.arrays.values():
            assert array.shape == (200, 200)
            assert np.all(array == value)
        assert json.dumps(found.document)
    assert max(values) > 0  # the kills fell on overwrites, not on the first write


def test_predict_targets_places_the_ensemble_with_the_kept_fit(tmp_path, capsys):
    # `predict --targets … --methods …,ensemble` on a store with a current fit: the
    # ensemble's rows are the masked targets placed by the kept predictor (the other
    # methods are refitted as before); without a fit the ensemble is refitted
    from pkps_core.cli import main
    from pkps_core.protocols.masks import mask_targets

    records = make_synthetic(
        n_models=18, n_tasks=3, budget=16, rho=1.0, random_state=8, family_size=3
    ).records
    path = tmp_path / "store.duckdb"
    with Store(path) as store:
        store.ingest(records, source="all")
    targets = sorted(records["model"].unique())[4:6]
    argv = ["predict", "--db", str(path), "--targets", ",".join(targets)]
    argv += ["--methods", "sample,ensemble"]
    assert main([*argv, "--out", str(tmp_path / "refit.csv")]) == 0
    assert "fitted predictor" not in capsys.readouterr().out
    with Store(path) as store:
        predictor = stored_predictor(store, holdout="model", random_state=0)
    assert main([*argv, "--out", str(tmp_path / "placed.csv")]) == 0
    printed = capsys.readouterr().out
    assert "the targets placed by the store's fitted predictor" in printed
    import pandas as pd

    placed = pd.read_csv(tmp_path / "placed.csv")
    refit = pd.read_csv(tmp_path / "refit.csv")
    ensemble = placed[placed["method"] == "ensemble"].sort_values(["model", "task"])
    assert sorted(ensemble["model"].unique()) == targets
    masked = mask_targets(records, targets, 4, seed=0)
    expected = predictor.predict(masked[masked["model"].isin(targets)])
    np.testing.assert_allclose(ensemble["prediction"], expected["prediction"], atol=1e-9)
    np.testing.assert_allclose(ensemble["reference_score"], expected["reference_score"])
    # the other methods are the refit path's, unchanged
    sample = placed[placed["method"] == "sample"].sort_values(["model", "task"])
    sample_before = refit[refit["method"] == "sample"].sort_values(["model", "task"])
    np.testing.assert_allclose(sample["prediction"], sample_before["prediction"])
    # and the two ensembles judge the same target cells within the placement's difference
    before = refit[(refit["method"] == "ensemble") & refit["model"].isin(targets)]
    before = before.sort_values(["model", "task"])
    assert np.abs(before["prediction"].to_numpy() - ensemble["prediction"].to_numpy()).max() < 0.1


@pytest.mark.slow
def test_readers_open_the_store_while_fit_computes(store_and_new, monkeypatch):
    """`fit` holds the file only for its reads and writes: a reader in another process
    (`info`, with no wait allowed) opens it while the predictor is being fitted."""
    from pkps_core.cli import main
    from pkps_core.predictor import ReferencePredictor

    path, _ = store_and_new
    fit = ReferencePredictor.fit
    seen = []

    def fit_beside_a_reader(self, *args, **kwargs):
        env = {**os.environ, "PKPS_STORE_WAIT": "0"}
        done = subprocess.run(
            [sys.executable, "-m", "pkps_core", "info", "--db", str(path)],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        seen.append(done)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(ReferencePredictor, "fit", fit_beside_a_reader)
    assert main(["fit", "--db", str(path), "--budgets", "4", "--no-leaderboard"]) == 0
    assert len(seen) == 1
    assert seen[0].returncode == 0, seen[0].stderr
    assert seen[0].stdout.startswith("23 models, 3 tasks")
    with Store(path, read_only=True) as store:
        assert (
            stored_predictor(
                store, fit="never", budgets=(4,), holdout="family", random_state=0
            ).references_.size
            == 23
        )


@pytest.mark.slow
def test_an_ingest_after_fit_read_its_records_leaves_the_new_fit_stale(store_and_new, monkeypatch):
    """The fit and the leaderboard are kept under the store version read before their
    records: rows ingested once the records are read (the file is not held while the fit
    computes) make both stale, never current for references they did not see."""
    from pkps_core.cli import main
    from pkps_core.leaderboard import stored_leaderboard

    path, thin = store_and_new
    extra = path.parent / "new.parquet"
    thin.to_parquet(extra)
    read = Store.records
    ingested = []

    def records_then_an_ingest(self, *args, **kwargs):
        records = read(self, *args, **kwargs)
        if not ingested:
            env = {**os.environ, "PKPS_STORE_WAIT": "0"}
            ingested.append(
                subprocess.run(
                    [sys.executable, "-m", "pkps_core", "ingest", str(extra), "--db", str(path)],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                )  # fmt: skip
            )
        return records

    monkeypatch.setattr(Store, "records", records_then_an_ingest)
    assert main(["fit", "--db", str(path), "--budgets", "4"]) == 0
    assert ingested[0].returncode == 0, ingested[0].stderr
    assert f"{len(thin)} added" in ingested[0].stdout
    with Store(path, read_only=True) as store:
        params = {"budgets": (4,), "holdout": "family", "random_state": 0}
        with pytest.raises(StaleFit):
            stored_predictor(store, fit="never", **params)
        assert stored_leaderboard(store, compute=False, **params) is None  # stale too
