"""Settings of the episodic-summarizer."""

from __future__ import annotations

from pydantic import Field

from services.common.runtime.settings import TierMemSettings


class EpisodicSummarizerSettings(TierMemSettings):
    passage_max_chars: int = Field(default=600, description="Longest passage (code points) indexed from a session.")
    summary_max_sentences: int = Field(default=8, description="Sentences kept by the offline summarizer.")
