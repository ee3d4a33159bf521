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
