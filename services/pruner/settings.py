"""Settings of the pruner. Environment variables use the shared `TIERMEM_` prefix, e.g.
`TIERMEM_PRUNE_INTERVAL_HOURS=1`."""

from __future__ import annotations

from pydantic import Field

from services.common.runtime.settings import TierMemSettings


class PrunerSettings(TierMemSettings):
    prune_interval_hours: float = Field(
        default=6.0,
        gt=0,
        description="Time between two scheduled prune passes; passes fall on multiples of it since the epoch "
        "(00:00, 06:00, 12:00, 18:00 UTC for 6 h), so restarts do not postpone them.",
    )
    prune_initial_delay_s: float = Field(
        default=60.0, ge=0, description="No scheduled pass runs sooner than this after start-up."
    )
    unrecalled_max_age_days: float | None = Field(
        default=90.0,
        gt=0,
        description=(
            "Episodes not recalled for this long (counted from the last recall, or from when the episode was "
            "stored when never recalled) are pruned before their TTL; unset disables the rule."
        ),
    )
    importance_keep_threshold: float | None = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Episodes at or above this importance are never forgotten by age, only at their TTL; unset: "
        "importance only stretches the never-recalled age.",
    )
    importance_stretch: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="How far importance moves the never-recalled age: × (1 - s + 2·s·importance), so with 0.5 an "
        "episode of importance 0.2 goes after 0.7 × the age and one of 0.75 after 1.25 ×; 0 ignores importance.",
    )
    recall_stretch: float = Field(
        default=1.0,
        ge=0,
        description="How far recalls stretch the never-recalled age: × (1 + r·ln(1 + recall count)); one recall "
        "gives × 1.69, five × 2.79 with 1.0; 0: only the time of the last recall counts.",
    )
    forget_compress: bool = Field(
        default=True,
        description="Forgotten episodes are first compressed into one summary episode per owner and visibility "
        "(keeping provenance to every source session) and deleted only when that summary is forgotten in turn; "
        "false: deleted at once.",
    )
    compress_max_group: int = Field(
        default=50, ge=1, description="Most forgotten episodes folded into one compressed summary."
    )
    compressed_summary_max_chars: int = Field(
        default=4000, ge=200, description="Longest summary of a compressed episode (each source gets an equal share)."
    )
    superseded_grace_days: float = Field(
        default=30.0, ge=0, description="Superseded fact versions are deleted this long after they were superseded."
    )
    prune_page_size: int = Field(default=500, ge=1, description="Points read per page while pruning one owner.")
    scan_limit: int = Field(
        default=100_000,
        ge=1,
        description="Most points read per owner and collection in one scan (never-recalled sweep, fact erasure).",
    )
    erasure_progress_ttl_hours: float = Field(
        default=168.0, gt=0, description="How long the progress record of an erasure is kept (crash recovery)."
    )
    erasure_drain_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest a user erasure waits for the user's work in flight (a summary or extraction being "
        "written) before it is retried; it reports completed only after that work is done and removed.",
    )
    control_enabled: bool = Field(
        default=True,
        description="Answer `tiermem prune --now` and `tiermem audit` requests on core NATS (the running pruner "
        "owns the stores; a Qdrant Edge shard cannot be opened by a second process).",
    )
