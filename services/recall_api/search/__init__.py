"""L1, on demand: `memory_search` (ranked ids with one-line abstracts) and `memory_expand` (one
memory in full)."""
