"""Build-time check of the image: the models load from inside the installed wheels with the network
off (HF_HUB_OFFLINE, LITELLM_LOCAL_MODEL_COST_MAP), so nothing downloads when a pod starts."""

from __future__ import annotations

import asyncio

from services.common.domain.tokens import TokenCounter
from services.common.gateways.embedding import build_embedder
from services.common.gateways.embedding_config import EmbeddingConfig
from services.common.gateways.keywords import KeywordEncoder


async def main() -> None:
    embedder = build_embedder(EmbeddingConfig())
    (vector,) = await embedder.embed_passages(["tiermem 메모리: the memory of an agent"])
    assert len(vector) == embedder.dim, (len(vector), embedder.dim)
    assert KeywordEncoder().encode_document("한국어 형태소 분석 keyword search").indices
    assert TokenCounter().count_tokens("offline tokenizer") > 0
    print(f"models load offline: {embedder.model_name} ({embedder.dim} dims), Kiwi, tokenizer")


if __name__ == "__main__":
    asyncio.run(main())
