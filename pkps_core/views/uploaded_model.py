"""An uploaded file's model as a new model: exactly one model, renamed when the store
holds its name, its texts embedded like the store's references (the New model page, the
``report --responses`` command and the fitted predictor's placement read it)."""

from __future__ import annotations

import pandas as pd

from pkps_core.records import EMBEDDING_COLUMNS, RecordsError, validate_records


def embedded_like_the_store(uploaded: pd.DataFrame, embedders: dict) -> pd.DataFrame:
    """The upload with vectors from the store's fitted embedders, where it has the texts
    and no vectors of its own (unchanged otherwise)."""
    out = uploaded.copy()
    for kind in ("query", "response"):
        column = f"{kind}_embedding"
        has_vectors = column in out and out[column].notna().all()
        if has_vectors or embedders.get(kind) is None:
            continue
        if kind not in out or out[kind].isna().any():
            return uploaded
        out[column] = list(embedders[kind].transform(out[kind].tolist()))
    return out


def upload_as_new(uploaded: pd.DataFrame, store_models) -> tuple[pd.DataFrame, str, list[str]]:
    """An uploaded file's records as one new model for the fitted predictor: exactly one
    model (else :class:`RecordsError`), renamed `` (uploaded)`` when the store already
    holds a model of that name (the store's is not the upload). Returns the records, the
    model's name and notes for the page."""
    models = sorted(uploaded["model"].astype(str).unique())
    if len(models) != 1:
        shown = ", ".join(repr(m) for m in models[:5])
        raise RecordsError(
            f"the upload holds {len(models)} models ({shown}); upload one model's responses, "
            "or add the others to the store on the Data page"
        )
    model, notes = models[0], []
    existing = set(map(str, store_models))
    if model in existing:
        name = f"{model} (uploaded)"
        while name in existing:
            name += "'"
        notes.append(f"the store already holds {model!r}; the upload is predicted as {name!r}")
        uploaded = uploaded.assign(model=name)
        model = name
    return uploaded, model, notes


def upload_target(
    uploaded: pd.DataFrame,
    store_records: pd.DataFrame,
    embedders: dict | None = None,
) -> tuple[pd.DataFrame, str, list[str]]:
    """An uploaded model's records joined to the store's, ready to predict it as a target.

    Parameters
    ----------
    uploaded : DataFrame
        Canonical records of exactly one model (e.g. :func:`pkps_core.uploads.read_uploads`).
    store_records : DataFrame
        The store's records (with or without embeddings).
    embedders : dict, optional
        ``{"query": embedder, "response": embedder}``: the store's fitted text embedders
        (:meth:`pkps_core.store.Store.fitted_embedder`). With them and ``store_records``
        carrying vectors, the upload's texts are embedded alike and the store's vectors
        kept; otherwise every text is embedded afresh together.

    Returns
    -------
    records : DataFrame
        Both, validated; embedding columns dropped unless every row has them (the texts
        are then embedded together by the offline embedder).
    model : str
        The target's name: the uploaded name, with `` (uploaded)`` appended when the
        store already holds a model of that name.
    notes : list of str
        What was changed, for the page to say.

    Raises
    ------
    RecordsError
        The upload holds no model or more than one.
    """
    uploaded, model, notes = upload_as_new(uploaded, store_records["model"].unique())
    if embedders and all(c in store_records for c in EMBEDDING_COLUMNS):
        uploaded = embedded_like_the_store(uploaded, embedders)
    combined = pd.concat([store_records, uploaded], ignore_index=True)
    partial = [c for c in EMBEDDING_COLUMNS if c in combined and combined[c].isna().any()]
    if partial:
        combined = combined.drop(columns=[c for c in EMBEDDING_COLUMNS if c in combined])
        notes.append(
            "texts embedded together with the offline embedder (the upload has no vectors)"
        )
    return validate_records(combined), model, notes
