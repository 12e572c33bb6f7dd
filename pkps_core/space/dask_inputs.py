"""Reaching a Dask cluster, and reading and embedding a partitioned Parquet cache on it.

:func:`resolve_client` finds the cluster of ``engine="dask"`` (a client, a scheduler
address, ``$PKPS_DASK_SCHEDULER`` or the default client) and :func:`connect` reaches an
address, refusing in one line when nothing answers; ``dask`` and ``distributed`` are
imported only then.

:func:`read_dataset_on_cluster` is the scale-out counterpart of
:func:`pkps_core.store.parquet.read_parquet_dataset` followed by
:func:`pkps_core.embed.embed_records`: every file of the dataset (``DIR/task=<name>/…``,
as written by ``export --to-parquet``) is read by a worker and stays there; the texts the
embedders are fitted on are drawn on the workers; each embedder is fitted **once**, in this
process, on that sample, then sent to every worker, which embeds its own files
(one task per file, the ``map_partitions`` pattern without a dataframe library).

The sample is a hash sample: each distinct text is kept when its BLAKE2b hash is among
the ``sample_texts`` smallest of the whole dataset. Each worker sends only its own
smallest hashes, so the driver never receives the corpus, and the sample does not depend
on how the dataset is split into files. When the dataset has at most ``sample_texts``
distinct texts of a kind, the sample is all of them and the vectors equal the local
:func:`~pkps_core.embed.embed_records` (same fit on the same sorted distinct texts).

The embedded records are gathered to this process, which prepares the space (the Dask
engine needs the response features in the client; see :mod:`pkps_core.space.dask_engine`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from sklearn.base import clone

from pkps_core.embed import TextEmbedder, default_embedder, transform_texts
from pkps_core.records import RecordsError

SAMPLE_TEXTS = 50_000  # distinct texts per kind the embedders are fitted on
SCHEDULER_ENV = "PKPS_DASK_SCHEDULER"
CONNECT_TIMEOUT = "10s"
CONNECT_TIMEOUT_ENV = "PKPS_DASK_CONNECT_TIMEOUT"  # e.g. "30s" for a far scheduler


def import_distributed():
    """The ``distributed`` module, or a ValueError saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise ValueError(
            "engine='dask' needs dask and distributed; install them with "
            "pip install 'dask[distributed]>=2026.1,<2027', or use engine='local'"
        ) from None
    return distributed


def connect(address: str):
    """A client of the scheduler at ``address``; a one-line ValueError if unreachable."""
    distributed = import_distributed()
    try:
        timeout = os.environ.get(CONNECT_TIMEOUT_ENV) or CONNECT_TIMEOUT
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:160]
        raise ValueError(
            f"cannot reach the Dask scheduler at {address!r} ({detail}); start one "
            f"(`dask scheduler` and `dask worker {address}`) or fix --scheduler / "
            f"{SCHEDULER_ENV}"
        ) from None


def resolve_client(client):
    """``(client, owned)``: a Client as given, or one for an address (``client``, else
    ``$PKPS_DASK_SCHEDULER``), reusing the default client when it is on that scheduler;
    ``owned`` is True when the caller must close it."""
    distributed = import_distributed()
    if client is not None and not isinstance(client, str):
        return client, False
    address = client or os.environ.get(SCHEDULER_ENV)
    try:
        current = distributed.get_client()
    except ValueError:
        current = None
    if address is None:
        if current is None:
            raise ValueError(
                "engine='dask' needs a cluster: pass client= (a distributed.Client or a "
                f"scheduler address such as tcp://host:8786) or set {SCHEDULER_ENV}"
            )
        return current, False
    if current is not None and current.scheduler is not None:
        if current.scheduler.address == address:
            return current, False
    return connect(address), True


def dataset_files(directory: str | Path) -> list[tuple[str, dict[str, str]]]:
    """``(path, partition keys)`` of every Parquet file of the dataset at ``directory``."""
    source = Path(directory)
    if not source.is_dir() or not any(source.rglob("*.parquet")):
        raise RecordsError(
            f"{source} is not a Parquet dataset (no .parquet files under it); make one with "
            "`python -m pkps_core export --db STORE --to-parquet DIR`"
        )
    try:
        dataset = ds.dataset(source, format="parquet", partitioning="hive")
        return [
            (fragment.path, {k: str(v) for k, v in _keys(fragment).items()})
            for fragment in dataset.get_fragments()
        ]
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecordsError(f"cannot read the Parquet dataset {source}: {exc}") from None


def _keys(fragment) -> dict:
    return ds.get_partition_keys(fragment.partition_expression) or {}


def read_file(path: str, keys: dict[str, str]) -> pd.DataFrame:
    """One file's records with its partition columns (``task``) restored."""
    frame = pq.read_table(path).to_pandas()
    for name, value in keys.items():
        frame[name] = value
    return frame


def text_hash(text: str) -> int:
    """A stable 64-bit hash of ``text`` (the sample's order)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def distinct_texts(frame: pd.DataFrame, column: str) -> list[str]:
    """The distinct texts of ``column`` (queries: one per (task, query_id))."""
    if column == "query":
        frame = frame.drop_duplicates(["task", "query_id"])
    return list(pd.unique(frame[column].astype(str)))


def smallest_hashes(frame: pd.DataFrame, column: str, limit: int) -> list[tuple[int, str]] | None:
    """The ``limit`` distinct texts of ``column`` with the smallest :func:`text_hash`;
    None when some row has no text in ``column``."""
    if column not in frame.columns or frame[column].isna().any():
        return None
    hashed = sorted((text_hash(text), text) for text in distinct_texts(frame, column))
    return hashed[:limit]


def embed_file(
    frame: pd.DataFrame, response_embedder: TextEmbedder | None, query_embedder: TextEmbedder | None
) -> pd.DataFrame:
    """``frame`` with ``response_embedding`` / ``query_embedding`` from fitted embedders."""
    out = frame.copy()
    for column, fitted in (("response", response_embedder), ("query", query_embedder)):
        if fitted is not None:
            texts = out[column].astype(str).tolist()
            out[f"{column}_embedding"] = list(transform_texts(fitted, texts))
    return out


def read_dataset_on_cluster(
    directory: str | Path,
    client,
    embedder: TextEmbedder | None = None,
    *,
    sample_texts: int = SAMPLE_TEXTS,
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """Records of the dataset at ``directory``, read and embedded on ``client``'s workers.

    Embeddings are added only where the dataset has none and every row has the text, as
    in :func:`~pkps_core.embed.embed_records`; ``embedder`` is the template (default
    :class:`~pkps_core.embed.TfidfSvdEmbedder`), fitted once per kind of text on a hash
    sample of at most ``sample_texts`` distinct texts. ``progress(done, total, label)`` is
    called after each step. Raises :class:`~pkps_core.records.RecordsError` (one line)
    for a directory that is not a dataset.
    """
    files = dataset_files(directory)
    steps = 4
    report = progress or (lambda done, total, label: None)
    frames = client.map(read_file, *zip(*files, strict=True), pure=False)
    columns = client.submit(lambda frame: list(frame.columns), frames[0]).result()
    report(1, steps, f"read {len(files)} file(s) on the workers")
    template = default_embedder() if embedder is None else embedder
    fitted: dict[str, TextEmbedder | None] = {}
    for column in ("response", "query"):
        fitted[column] = None
        if f"{column}_embedding" in columns or column not in columns:
            continue
        parts = client.gather(
            client.map(smallest_hashes, frames, column=column, limit=sample_texts)
        )
        if any(part is None for part in parts):
            continue  # a file without the text everywhere: embed_records would skip it
        sample = sorted(text for _, text in sorted(set().union(*parts))[:sample_texts])
        fitted[column] = clone(template, safe=False).fit(sample)
    report(2, steps, "fitted the embedders on a sample")
    if fitted["response"] is None and fitted["query"] is None:
        embedded = frames
    else:
        shared = {
            column: None if model is None else client.scatter(model, broadcast=True)
            for column, model in fitted.items()
        }
        embedded = client.map(
            embed_file,
            frames,
            response_embedder=shared["response"],
            query_embedder=shared["query"],
            pure=False,
        )
    parts = client.gather(embedded)
    report(3, steps, "embedded on the workers")
    records = pd.concat(parts, ignore_index=True)
    report(4, steps, f"gathered {len(records):,} records")
    return records
