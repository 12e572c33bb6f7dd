"""Cached loads and fits, keyed by their inputs.

Every key starts with the store path and its ``version`` (bumped by every ingest), then the
kernel / bandwidth / method settings. Large read-only objects (records with embeddings,
prepared caches, prediction contexts) live in ``st.cache_resource`` so they are not copied
on every read; small results (summaries, predictions) in ``st.cache_data``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from perspective_app.shared.background import UMAP_SPINNER
from perspective_app.shared.store import open_store
from pkps_core import views
from pkps_core.predict import PredictionContext, build_context, predict
from pkps_core.protocols.masks import mask_targets
from pkps_core.records import cell_table
from pkps_core.space import PerspectiveSpace, PreparedCache, prepare_cache
from pkps_core.space.paired_sums import response_grid

# A fit estimated to take longer than this asks first (RBF response kernel on a big cache).
SLOW_FIT_SECONDS = 20.0
INTERVAL_LEVEL = 0.9


@st.cache_resource(max_entries=4, show_spinner="Loading the responses and their embeddings…")
def load_records(path: str, version: int) -> pd.DataFrame:
    """The store's records with embeddings (texts are embedded once, on first use)."""
    return open_store(path).records()


def predictor_status(path: str, holdout: str) -> str:
    """ "current", "stale" or "none": the store's fitted reference predictor (``fit``) for
    the new-model page's settings."""
    from pkps_core.predictor import FIT_KIND, ReferencePredictor
    from pkps_core.store.fits import fit_key, fit_status

    key = fit_key(FIT_KIND, ReferencePredictor(holdout=holdout).settings())
    return fit_status(open_store(path), key)


@st.cache_resource(max_entries=4, show_spinner="Reading the fitted reference predictor…")
def load_predictor(path: str, version: int, holdout: str):
    """The store's fitted reference predictor at this store version (read, never fitted
    here: :func:`fit_predictor` fits it, with progress)."""
    from pkps_core.predictor import stored_predictor

    return stored_predictor(
        open_store(path), fit="never", records=load_records(path, version), holdout=holdout
    )


def fit_predictor(path: str, version: int, holdout: str, progress) -> None:
    """Fit the store's reference predictor and keep it in the store (``progress(fraction,
    message)``); the next :func:`load_predictor` reads it."""
    from pkps_core.predictor import stored_predictor

    stored_predictor(
        open_store(path),
        fit="always",
        records=load_records(path, version),
        store_version=version,  # kept as of these records: stale if the store moved on
        holdout=holdout,
        progress=progress,
    )
    load_predictor.clear()


@st.cache_resource(max_entries=4, show_spinner="Preparing the kernel arrays…")
def load_prepared(path: str, version: int) -> PreparedCache:
    return prepare_cache(load_records(path, version), validated=True)


@st.cache_data(max_entries=8, show_spinner="Reading the store…")
def load_cells(path: str, version: int) -> pd.DataFrame:
    """Per (model, task) cell: family, responses, sample score, reference."""
    return cell_table(open_store(path).records(with_embeddings=False))


@st.cache_data(max_entries=16, show_spinner="Counting shared queries…")
def load_pairedness(path: str, version: int, task: str | None) -> pd.DataFrame:
    return open_store(path).pairedness(task)


@st.cache_data(max_entries=32, show_spinner="Fitting the perspective space…")
def fit_space(
    path: str,
    version: int,
    query_kernel: str,
    response_kernel: str,
    bandwidth: str | float,
    n_components: int,
) -> views.SpaceSummary:
    """Fit PKPS (``"rbf"``) or DKPS (``"delta"``).

    ``bandwidth`` is ``"cv"`` or a multiple of the median query distance (0 = delta
    limit); the median comes from the cross-validated fit of the same store.
    """
    if query_kernel == "rbf":
        # one cross-validated fit keeps the kernel sums of every grid bandwidth, so moving
        # the slider between grid points costs an MDS, not a refit
        space = cv_space(path, version, response_kernel, n_components)
        if bandwidth != "cv":
            space = space.select_bandwidth(float(bandwidth) * space.median_query_distance_)
        return views.summarize_space(space)
    params = {
        "query_kernel": query_kernel,
        "response_kernel": response_kernel,
        "n_components": int(n_components),
    }
    space = PerspectiveSpace(**params).fit(load_prepared(path, version))
    return views.summarize_space(space)


@st.cache_resource(max_entries=4, show_spinner="Cross-validating the query bandwidth…")
def cv_space(path: str, version: int, response_kernel: str, n_components: int) -> PerspectiveSpace:
    """The cross-validated PKPS fit (with every grid bandwidth's kernel sums)."""
    params = {
        "query_kernel": "rbf",
        "response_kernel": response_kernel,
        "n_components": int(n_components),
    }
    return PerspectiveSpace(**params).fit(load_prepared(path, version))


@st.cache_data(max_entries=16, show_spinner=UMAP_SPINNER)
def umap_view(
    path: str,
    version: int,
    query_kernel: str,
    response_kernel: str,
    bandwidth: str | float,
    n_components: int,
):
    summary = fit_space(path, version, query_kernel, response_kernel, bandwidth, n_components)
    dims = [c for c in summary.coordinates.columns if c.startswith("dim_")]
    return views.umap_2d(summary.coordinates[dims].to_numpy())


@st.cache_data(max_entries=16, show_spinner="Estimating the cost of the RBF response kernel…")
def rbf_estimate(path: str, version: int, query_kernel: str) -> dict[str, float]:
    """Responses, passes and estimated seconds of the Perspective page's RBF fits."""
    prepared = load_prepared(path, version)
    n_responses = prepared.layout.n_responses
    passes = views.rbf_passes(query_kernel)
    paired = response_grid(prepared.layout) is not None
    seconds = views.rbf_fit_seconds(
        n_responses,
        len(prepared.models),
        prepared.response_vectors.shape[1] + 1,
        passes,
        paired=paired,
    )
    return {"responses": n_responses, "passes": passes, "seconds": seconds, "paired": paired}


@dataclass(frozen=True)
class PredictionKey:
    """What the Predictions page's context depends on: the store at a version and the
    form's settings (methods and intervals aside). One object, so the cached functions
    below cannot disagree on the order of their arguments."""

    path: str
    version: int
    holdout: str
    targets: tuple[str, ...]
    bandwidth: str
    response_kernel: str
    budget: int


@st.cache_resource(max_entries=2, show_spinner=False)
def prediction_context(key: PredictionKey) -> PredictionContext:
    """The Predictions page's context: targets keep ``budget`` responses per task and are
    judged against their full data (:func:`pkps_core.protocols.masks.mask_targets`)."""
    records = load_records(key.path, key.version)
    if key.targets:
        records = mask_targets(records, key.targets, key.budget, seed=0)
    return build_context(
        records,
        holdout=key.holdout,
        targets=list(key.targets) or None,
        space_params={"query_bandwidth": key.bandwidth, "response_kernel": key.response_kernel},
    )


@st.cache_data(max_entries=64, show_spinner=False)
def predict_cells(key: PredictionKey, method: str, intervals: bool) -> tuple[pd.DataFrame, float]:
    """One method's predictions on :func:`prediction_context` (with 90 % conformal
    intervals and warnings if asked), and when they were computed (``time.time()``: a
    run that finds an older time read them from the cache)."""
    level = INTERVAL_LEVEL if intervals else None
    return predict(prediction_context(key), [method], intervals=level), time.time()


@st.cache_data(max_entries=8, show_spinner="Fitting the spaces for the coordinates…")
def prediction_coordinates(key: PredictionKey) -> pd.DataFrame:
    context = prediction_context(key)
    summaries = {
        "pkps": views.summarize_space(context.pkps),
        "dkps": views.summarize_space(context.dkps),
    }
    export = views.coordinates_export(summaries)
    # the references' shadows (calibration copies observed like the targets) are not models
    return export[~export["model"].isin(context.models[context.shadows])].reset_index(drop=True)
