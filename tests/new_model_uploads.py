"""What the New model page's tests upload: one store model's responses as a new model."""

from pathlib import Path

from pkps_core.store import Store

UPLOADED = "upload/new-model"


def twenty_unscored_responses(store: Path) -> bytes:
    """One store model's first 20 responses, renamed, texts only (no scores, references or
    vectors), as users have them: CSV bytes."""
    with Store(store) as db:
        records = db.records(with_embeddings=False)
    model = sorted(records["model"].unique())[7]
    own = records[records["model"] == model].head(20)
    kept = ["model", "task", "query_id", "query", "response"]
    return own[kept].assign(model=UPLOADED).to_csv(index=False).encode()
