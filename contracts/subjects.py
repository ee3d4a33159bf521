"""NATS subject names. Each carries a version and the tenant and user tokens, so one user's
messages can be selected (and purged) by subject."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subjects:
    """Subject and stream names under a configurable root (default ``memory``)."""

    root: str = "memory"

    # ---- stream names -------------------------------------------------------------------------
    @property
    def _stream_prefix(self) -> str:
        # Stream names may not contain '.', '*', '>' or spaces; the root is a subject token.
        return self.root.upper().replace("-", "_")

    @property
    def session_stream(self) -> str:
        return f"{self._stream_prefix}_SESSIONS"

    @property
    def derived_stream(self) -> str:
        return f"{self._stream_prefix}_EVENTS"

    @property
    def dead_letter_stream(self) -> str:
        return f"{self._stream_prefix}_DLQ"

    @property
    def advisory_stream(self) -> str:
        """JetStream's MAX_DELIVERIES advisories about the consumers of the two streams above that
        consumers read: kept, so that one announced while no process listened is still handled."""
        return f"{self._stream_prefix}_ADVISORIES"

    @property
    def consumed_streams(self) -> tuple[str, str]:
        """The streams the services' durable consumers read."""
        return (self.session_stream, self.derived_stream)

    # ---- subjects -----------------------------------------------------------------------------
    def session_completed(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.session.completed.v1.{tenant_id}.{user_id}"

    def episode_created(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.episode.created.v1.{tenant_id}.{user_id}"

    def entity_upserted(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.entity.upserted.v1.{tenant_id}.{user_id}"

    def entity_merged(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.entity.merged.v1.{tenant_id}.{user_id}"

    def erasure_requested(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.erasure.requested.v1.{tenant_id}.{user_id}"

    def erasure_completed(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.erasure.completed.v1.{tenant_id}.{user_id}"

    def prune_completed(self) -> str:
        return f"{self.root}.prune.completed.v1"

    def dead_letter(self, consumer: str, tenant_id: str | None, user_id: str | None) -> str:
        return f"{self.root}.dlq.v1.{consumer}.{tenant_id or '_'}.{user_id or '_'}"

    # ---- wildcards used by streams and consumers ----------------------------------------------
    def all_session_completed(self) -> str:
        return f"{self.root}.session.completed.v1.*.*"

    def all_of(self, kind: str) -> str:
        """e.g. ``all_of('episode.created')`` → ``memory.episode.created.v1.*.*``."""
        return f"{self.root}.{kind}.v1.*.*"

    def derived_wildcards(self) -> list[str]:
        return [
            self.all_of("episode.created"),
            self.all_of("entity.upserted"),
            self.all_of("entity.merged"),
            self.all_of("erasure.requested"),
            self.all_of("erasure.completed"),
            self.prune_completed(),
        ]

    def all_dead_letters(self) -> str:
        return f"{self.root}.dlq.v1.>"

    @staticmethod
    def max_deliveries_advisory(stream: str, consumer: str) -> str:
        """Where JetStream announces that a message of `consumer` (on `stream`) ran out of deliveries;
        `consumer` may be `*`."""
        return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"

    def all_max_deliveries_advisories(self) -> list[str]:
        """The advisories of every consumer of the consumed streams (the advisory stream's subjects)."""
        return [self.max_deliveries_advisory(stream, "*") for stream in self.consumed_streams]

    def user_filter(self, kind: str, tenant_id: str, user_id: str) -> str:
        """Subject matching every message of one kind for one user (used to purge)."""
        return f"{self.root}.{kind}.v1.{tenant_id}.{user_id}"

    def user_dead_letters(self, tenant_id: str, user_id: str) -> str:
        return f"{self.root}.dlq.v1.*.{tenant_id}.{user_id}"

    def tokens_from(self, subject: str) -> tuple[str | None, str | None]:
        """Tenant and user tokens of a versioned per-user subject, or (None, None)."""
        parts = subject.split(".")
        if len(parts) >= 6 and parts[0] == self.root and parts[3] == "v1":
            return parts[4], parts[5]
        return None, None
