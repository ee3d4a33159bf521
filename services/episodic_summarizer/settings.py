"""Settings of the episodic-summarizer."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from services.common.runtime.settings import TierMemSettings


class EpisodicSummarizerSettings(TierMemSettings):
    passage_max_chars: int = Field(default=600, description="Longest passage (code points) indexed from a session.")
    summary_max_sentences: int = Field(default=8, description="Sentences kept by the offline summarizer.")
    burst_gap_seconds: float = Field(
        default=0.0,
        ge=0,
        description="A speaker's consecutive messages sent at most this many seconds apart are one turn "
        "('Jo: ok / the build is green'); messages without a time merge when adjacent. 0: never merged.",
    )
    passage_segment_gap_minutes: float = Field(
        default=30.0,
        ge=0,
        description="A silence longer than this between two turns (both with a time) starts a new passage. 0: off.",
    )
    passage_max_turns: int = Field(default=0, ge=0, description="Most turns in one passage. 0: no cap.")
    # Embeds each turn of a passage once more (short texts: about the passages' own cost again); L1
    # then meets a question about one message of a long burst of them. See docs/evaluation.md.
    passage_turn_points: bool = Field(
        default=True,
        description="Also store each turn of a passage of several (a speaker's run of messages is one) as "
        "a point of its own meaning, which L1 counts for its passage when it is the closer match.",
    )
    passage_date_header: bool = Field(
        default=False, description="Start every passage with a line giving the session's date ('8 May 2023')."
    )
    relative_dates: bool = Field(
        default=False,
        description="Write the date beside relative time in passages ('yesterday [7 May 2023]', '어제 [...]'), "
        "counted from the message's own time, else the session's start.",
    )
    speaker_aliases: bool = Field(
        default=False,
        description="Record the names participants call each other ('hey Jonny') on the episode and beside "
        "the speaker's label once per passage ('Jonathan (Jonny): ...').",
    )

    @property
    def burst_gap(self) -> timedelta | None:
        return timedelta(seconds=self.burst_gap_seconds) if self.burst_gap_seconds > 0 else None

    @property
    def segment_gap(self) -> timedelta | None:
        return timedelta(minutes=self.passage_segment_gap_minutes) if self.passage_segment_gap_minutes > 0 else None
