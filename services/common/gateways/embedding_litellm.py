"""Remote embeddings: any provider through `litellm.aembedding`, batched, with the LLM gateway's bounded
retries. Prefixes are configurable for remote e5-family models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr

from services.common.gateways.llm import ProgressCallback, RetryPolicy, call_with_retries, import_litellm


class EmbeddingError(RuntimeError):
    """An embedding response was unusable (wrong count, ragged or changing dimensions)."""


def _vectors_from_response(response: Any, expected: int) -> list[list[float]]:
    data = getattr(response, "data", None)
    if data is None and isinstance(response, dict):
        data = response.get("data")
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else "no"
        raise EmbeddingError(f"embedding response has {got} vectors for {expected} inputs")
    items: list[tuple[int, list[float]]] = []
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else getattr(item, "index", position)
        vector = item.get("embedding") if isinstance(item, dict) else getattr(item, "embedding", None)
        if not isinstance(vector, list) or not vector:
            raise EmbeddingError(f"embedding response item {position} has no vector")
        items.append((int(index), [float(v) for v in vector]))
    items.sort(key=lambda pair: pair[0])
    return [vector for _, vector in items]


class LiteLlmEmbedder:
    """Embeddings from any litellm-supported provider, batched, with bounded retries."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: SecretStr | str | None = None,
        batch_size: int = 32,
        dim: int | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        total_budget_s: float = 60.0,
        query_prefix: str = "",
        passage_prefix: str = "",
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self._batch_size = batch_size
        self._dim = dim
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self._on_progress = on_progress
        self._policy = RetryPolicy(
            max_attempts=max_attempts,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
            total_budget_s=total_budget_s,
            timeout_s=timeout_s,
        )

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbeddingError(
                f"the vector size of {self._model} is not known yet: configure dim, or embed once first"
            )
        return self._dim

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        litellm = import_litellm()

        async def attempt(timeout_s: float) -> list[list[float]]:
            kwargs: dict[str, Any] = {
                "model": self._model,
                "input": texts,
                "timeout": timeout_s,
                "max_retries": 0,
                "num_retries": 0,
            }
            if self._api_base:
                kwargs["api_base"] = self._api_base
            if self._api_key is not None:
                kwargs["api_key"] = self._api_key.get_secret_value()
            response = await litellm.aembedding(**kwargs)
            return _vectors_from_response(response, len(texts))

        vectors, _ = await call_with_retries(
            self._policy, attempt, on_progress=self._on_progress, what=f"embedding with {self._model}"
        )
        return vectors

    def _check_dims(self, vectors: list[list[float]]) -> None:
        for vector in vectors:
            if self._dim is None:
                self._dim = len(vector)
            elif len(vector) != self._dim:
                raise EmbeddingError(f"{self._model} returned a {len(vector)}-d vector; expected {self._dim}")

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors = await self._embed_batch(texts[start : start + self._batch_size])
            self._check_dims(vectors)
            out.extend(vectors)
        return out

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await self._embed([self._passage_prefix + text for text in texts])

    async def embed_query(self, text: str) -> list[float]:
        return (await self._embed([self._query_prefix + text]))[0]
