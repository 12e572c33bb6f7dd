"""The reference predictor's fitted state: arrays and a JSON document, kept in the store.

:func:`get_state` / :func:`from_state` turn a fitted
:class:`~pkps_core.predictor.core.ReferencePredictor` into named numeric arrays and back
(no pickle: :mod:`pkps_core.store.fits`); :func:`stored_predictor` reads a store's kept fit
when it is current (same responses, same embedders, same settings) and otherwise fits it,
with progress, and keeps it — or says so (:class:`StaleFit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pandas as pd

from pkps_core.predictor.core import (
    STATE_VERSION,
    PlacedSpace,
    Profile,
    ReferencePredictor,
    _Calibration,
)
from pkps_core.records import RecordsError
from pkps_core.space import kernels

FIT_KIND = "reference-predictor"


class RestoredEmbedders(Mapping):
    """A kept fit's embedders, each restored from its stored state when first asked for:
    restoring imports scikit-learn (about a second), which placing a model whose vectors
    are stored never needs."""

    def __init__(self, states: dict[str, bytes]):
        self._states, self._restored = states, {}

    def __getitem__(self, kind: str):
        if kind not in self._restored:
            from pkps_core.embed import default_embedder

            self._restored[kind] = default_embedder().set_state(self._states[kind])
        return self._restored[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)


def get_state(predictor: ReferencePredictor) -> tuple[dict, dict[str, np.ndarray]]:
    """The fitted state as a JSON document and named numeric arrays (no pickle)."""
    document = {
        "settings": predictor.settings(),
        "references": [str(m) for m in predictor.references_],
        "profiles": [],
    }
    arrays: dict[str, np.ndarray] = {}
    document["embedders"] = sorted(predictor.embedders_)
    for kind, fitted in predictor.embedders_.items():
        arrays[f"embedder/{kind}"] = np.frombuffer(fitted.get_state(), dtype=np.uint8)
    for key, calibration in predictor.profiles_.items():
        profile = calibration.profile
        document["profiles"].append(
            {
                "key": key,
                "budget": profile.budget,
                "scored": profile.scored,
                "tasks": None if profile.tasks is None else list(profile.tasks),
                "spaces": {
                    name: {
                        "query_bandwidth": space.query_bandwidth_,
                        "response_kernel": space.response_kernel,
                        "response_bandwidth": space.response_bandwidth_,
                    }
                    for name, space in calibration.spaces.items()
                },
                "grids": sorted(calibration.grids),
                "fit_seconds": calibration.fit_seconds,
            }
        )
        context = calibration.context
        arrays[f"{key}/models"] = np.asarray(context.models, dtype=str)
        arrays[f"{key}/item_sd"] = np.asarray(context.item_sd(), dtype=float)
        arrays[f"{key}/region_threshold"] = calibration.region_threshold
        for name, grid in calibration.grids.items():
            arrays[f"{key}/grid/{name}"] = np.asarray(grid, dtype=float)
        for name, space in calibration.spaces.items():
            sums = calibration.sums[name]
            arrays[f"{key}/{name}/distance"] = space.distance_matrix_
            arrays[f"{key}/{name}/embedding"] = space.embedding_
            arrays[f"{key}/{name}/eigenvalues"] = space.eigenvalues_
            arrays[f"{key}/{name}/numerator"] = sums.numerator
            arrays[f"{key}/{name}/denominator"] = sums.denominator
            arrays[f"{key}/{name}/self_numerator"] = sums.self_numerator
            arrays[f"{key}/{name}/self_denominator"] = sums.self_denominator
    return document, arrays


def from_state(
    document: dict, arrays: dict[str, np.ndarray], records: pd.DataFrame
) -> ReferencePredictor:
    """A fitted predictor from :func:`get_state`'s output and the same references'
    validated records (the shadows are drawn again, seeded, and checked against the
    stored model list: any difference is an error, never a silently different fit)."""
    settings = document["settings"]
    if settings.get("state_version") != STATE_VERSION:
        raise RecordsError("the stored predictor was made by another version; fit it again")
    predictor = ReferencePredictor(
        budgets=tuple(settings["budgets"]),
        modes=tuple(settings["modes"]),
        holdout=settings["holdout"],
        n_neighbors=settings["n_neighbors"],
        shadow_repeats=settings["shadow_repeats"],
        space_params=_tuples(settings["space_params"]),
        random_state=settings["random_state"],
        neighbours=settings["neighbours"],
    )
    embedders = RestoredEmbedders(
        {kind: arrays[f"embedder/{kind}"].tobytes() for kind in document.get("embedders", [])}
    )
    predictor._set_references(records, embedders=embedders)
    if [str(m) for m in predictor.references_] != document["references"]:
        raise RecordsError("the stored predictor was fitted on other references; fit it again")
    predictor.profiles_ = {}
    predictor._stored = {entry["key"]: entry for entry in document["profiles"]}
    predictor._stored_arrays = arrays
    predictor._restore = restore_profile
    predictor.fit_seconds_ = sum(entry["fit_seconds"] for entry in document["profiles"])
    return predictor


def restore_profile(predictor: ReferencePredictor, key: str) -> _Calibration:
    """Rebuild profile ``key``'s calibration from the stored arrays (no fitting)."""
    entry = predictor._stored[key]
    arrays = predictor._stored_arrays
    tasks = None if entry["tasks"] is None else tuple(entry["tasks"])
    profile = Profile(int(entry["budget"]), bool(entry["scored"]), tasks)
    context = predictor._profile_context(profile)
    if [str(m) for m in context.models] != arrays[f"{key}/models"].tolist():
        raise RecordsError("the stored predictor's shadows differ from today's; fit it again")
    context.shared["item_sd"] = arrays[f"{key}/item_sd"]
    spaces, sums = {}, {}
    inside = context.mds_inside()  # as the fit placed its shadows
    for name, meta in entry["spaces"].items():
        spaces[name] = PlacedSpace(
            models_=context.models,
            families_=context.families,
            distance_matrix_=arrays[f"{key}/{name}/distance"],
            embedding_=arrays[f"{key}/{name}/embedding"],
            eigenvalues_=arrays[f"{key}/{name}/eigenvalues"],
            query_bandwidth_=float(meta["query_bandwidth"]),
            response_kernel=meta["response_kernel"],
            response_bandwidth_=float(meta["response_bandwidth"]),
            inside_=inside,
        )
        context.shared[("space", name)] = spaces[name]
        sums[name] = kernels.KernelSums(*(arrays[f"{key}/{name}/{part}"] for part in _SUM_PARTS))
    calibration = _Calibration(
        profile=profile,
        context=context,
        spaces=spaces,
        sums=sums,
        grids={name: arrays[f"{key}/grid/{name}"] for name in entry["grids"]},
        region_threshold=arrays[f"{key}/region_threshold"],
        fit_seconds=float(entry["fit_seconds"]),
    )
    predictor.profiles_[key] = calibration
    return calibration


_SUM_PARTS = ("numerator", "denominator", "self_numerator", "self_denominator")


def _tuples(params: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}


class StaleFit(RuntimeError):
    """The store's predictor was fitted on other responses or embeddings."""


def stored_predictor(
    store,
    *,
    fit: str = "if-stale",
    progress: Callable[[float, str], None] | None = None,
    records: pd.DataFrame | None = None,
    store_version: int | None = None,
    **params,
) -> ReferencePredictor:
    """The store's fitted reference predictor: read when current, else fitted and kept.

    Parameters
    ----------
    store : pkps_core.store.Store
    fit : {"if-stale", "never", "always"}
        "never" raises :class:`StaleFit` instead of fitting a missing or stale predictor
        (a read-only store cannot keep a new fit, but one is still fitted and returned
        under "if-stale").
    progress : callable, optional
        ``progress(fraction, message)`` while fitting.
    records : DataFrame, optional
        ``store.records()`` when the caller has them already.
    store_version : int, optional
        The store's version when ``records`` were read (default: read before reading
        them); a fit kept with it is stale after any later change, never current for
        references it did not see (a store opened with ``hold=False`` can change between
        two reads).
    **params
        :class:`ReferencePredictor` parameters.
    """
    from pkps_core.store.fits import embedders_digest, fit_key, fit_status, load_fit, save_fit

    if fit not in ("if-stale", "never", "always"):
        raise ValueError(f"fit must be 'if-stale', 'never' or 'always', got {fit!r}")
    predictor = ReferencePredictor(**params)
    predictor._check_params()
    key = fit_key(FIT_KIND, predictor.settings())
    version = store.version if store_version is None else store_version
    # a forced fit needs no status: the embedders' digest (of their 31 MB on AlpacaEval-40)
    # is then read once, after the records (whose first read fits the embedders)
    status = "none" if fit == "always" else fit_status(store, key)
    if fit == "never" and status != "current":
        raise StaleFit(
            f"the store {store.path} has {'no' if status == 'none' else 'a stale'} fitted "
            "predictor for these settings; run `python -m pkps_core fit --db "
            f"{store.path}` (its references changed since)"
            if status == "stale"
            else f"the store {store.path} has no fitted predictor for these settings; run "
            f"`python -m pkps_core fit --db {store.path}`"
        )
    records = store.records() if records is None else records
    if status == "current" and fit != "always":
        found = load_fit(store, key)
        if found is not None:
            return from_state(found.document, found.arrays, records)
    # the embedders the records were embedded with: a refit while the fit runs leaves it
    # stale, not current
    digest = None if store.read_only else embedders_digest(store)
    predictor.fit(records, progress=progress, validated=True)
    if not store.read_only:
        document, arrays = get_state(predictor)
        save_fit(store, key, document, arrays, version, embedders=digest)
    return predictor
