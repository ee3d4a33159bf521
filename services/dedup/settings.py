"""Settings of the dedup service."""

from __future__ import annotations

from pydantic import Field

from services.common.runtime.settings import TierMemSettings


class DedupSettings(TierMemSettings):
    fuzzy_threshold: float = Field(default=0.9, ge=0, le=1, description="rapidfuzz similarity that merges.")
    ambiguous_band: float = Field(default=0.12, ge=0, le=1, description="Below a threshold by this much: ask the LLM.")
    embedding_threshold: float = Field(default=0.95, ge=0, le=1, description="Name-embedding cosine that merges.")
    embedding_max_candidates: int = Field(
        default=500, description="Skip the embedding stage when a scope holds more entities than this."
    )
    llm_min_confidence: float = Field(
        default=0.7, ge=0, le=1, description="Least confidence of the LLM's same-entity answer that merges."
    )
