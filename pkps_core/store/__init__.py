"""The response store: one DuckDB file holding a validated cache and its embeddings.

:class:`Store` (module ``core``) opens the file and answers every read; ``schema`` holds
the tables, ``ingest`` the one-transaction merge of new records, ``arrow`` the conversions
between vectors, Arrow and DuckDB results, and ``locks`` the per-file write locks.
"""

from pkps_core.store.core import Store
from pkps_core.store.ingest import IngestReport, text_hash
from pkps_core.store.opening import StoreError

__all__ = ["IngestReport", "Store", "StoreError", "text_hash"]
