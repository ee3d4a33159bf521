"""Settings of the semantic-extractor."""

from __future__ import annotations

from pydantic import Field

from services.common.runtime.settings import TierMemSettings


class SemanticExtractorSettings(TierMemSettings):
    confirm_threshold: int = Field(default=2, ge=1, description="Observations that promote a fact to confirmed.")
    max_excerpt_chars: int = Field(default=12_000, description="Raw transcript characters sent to the LLM.")
