"""dedup: EntityUpserted → merge duplicate entity nodes (exact/alias, fuzzy, embedding, LLM) → EntityMerged."""
