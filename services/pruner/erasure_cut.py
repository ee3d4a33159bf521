"""What a fact erasure leaves alone: the sessions accepted after its cut, and everything derived from
them.

The cut is the session stream's last sequence when the recall API accepted the request (its 202). A
user who states the forgotten value again after that, on purpose, is telling us again: that session
(above the cut) is kept, and so is its episode, its passages, its events, its fact and the graph's
name for it. Sessions at or below the cut are redacted, whenever they are consolidated.

An open session (a per-turn session not yet completed) has no stream sequence: there the rule is
each turn's append time against the request's acceptance time; turns appended after it are kept. A
per-turn session that completed after the cut but holds turns appended before the 202 (ended, or
closed idle, before the erasure reached its bucket) is not spared as a whole: its record, kept in the
bucket after it closes, still has every turn's append time, so the erasure redacts its earlier turns
in the stream (`early_turns`) and keeps the later ones.

Lineage is by session id: an episode's id is derived from its session id, a fact's observations
name their session (or, saved over the API, carry the time it was saved), a dead letter of a raw
session keeps that session's sequence. The sessions kept are those above the cut that still state the
value: a redacted copy this erasure publishes lands above the cut too, but no longer states it, so
its session (one being redacted) is not taken for a kept one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext
from pydantic import AwareDatetime, BaseModel, TypeAdapter, ValidationError

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.domain.value_text import Needle, text_mentions
from services.common.stores.episodes import episode_id_for
from services.common.stores.erasure import stream_messages
from services.common.stores.graph.repository import EntityRecord
from services.common.stores.value_places import json_or_text, open_session_store
from services.common.stores.vector.port import FACTS

_TIME = TypeAdapter(AwareDatetime)


@dataclass(frozen=True)
class AfterCut:
    """The `Lineage` of an erasure accepted at `cut` (see the module docstring)."""

    session_stream: str
    cut: int
    accepted_at: datetime
    sessions: frozenset[str]
    """Ids of the owner's sessions above the cut that state the value."""
    episodes: frozenset[str]
    """Their episodes' ids."""
    early_turns: Mapping[str, tuple[bool, ...]] = field(default_factory=dict)
    """Event ids of per-turn sessions completed after the cut with turns appended before the request:
    for each message, whether it was appended before."""

    def early_flags(self, data: Any) -> tuple[bool, ...] | None:
        """For a session-stream message completed from a per-turn session with turns appended before
        the request: which of its messages were (None: an ordinary session, or only later turns)."""
        if not isinstance(data, Mapping):
            return None
        return self.early_turns.get(str(data.get("event_id")))

    # ---- the Lineage protocol (services.common.stores.value_places) ------------------------------

    def spares_message(self, stream: str, seq: int, data: Any) -> bool:
        if stream == self.session_stream:
            return seq > self.cut and self.early_flags(data) is None
        return self._derived_from_kept(data)

    def spares_point(self, collection: str, payload: Mapping[str, Any]) -> bool:
        if collection == FACTS:
            return self.fact_is_kept(payload.get("provenance"))
        return payload.get("session_id") in self.sessions

    def spares_entity(self, entity: EntityRecord) -> bool:
        """An entity a kept episode names is the user's name for what they said again; the erasure
        removes the earlier episodes' part in it (`FactErasure.graph_entities`)."""
        return bool(self.episodes & set(entity.episode_ids))

    def spares_turn(self, appended_at: datetime) -> bool:
        """An open session's turn appended after the request was accepted (both times are the
        recall API's clock)."""
        return appended_at > self.accepted_at

    # ---- facts --------------------------------------------------------------------------------

    def kept_observations(self, provenance: Any) -> list[Any]:
        """The observations (fact provenance entries, as stored) made after the cut."""
        if not isinstance(provenance, Sequence) or isinstance(provenance, str):
            return []
        return [observation for observation in provenance if self._observed_after(observation)]

    def fact_is_kept(self, provenance: Any) -> bool:
        """Every observation of the fact was made after the cut (a fact also observed before it is not
        kept as it is: the erasure drops the earlier observations first)."""
        kept = self.kept_observations(provenance)
        return bool(kept) and isinstance(provenance, Sequence) and len(kept) == len(provenance)

    def _observed_after(self, observation: Any) -> bool:
        """`observation`: a FactProvenance, or one as stored in a payload."""
        fields = observation.model_dump() if isinstance(observation, BaseModel) else observation
        if not isinstance(fields, Mapping):
            return False
        if fields.get("session_id") in self.sessions or fields.get("episode_id") in self.episodes:
            return True
        if fields.get("source") != "api":
            return False
        # Saved over the API: kept when saved after the request was accepted.
        try:
            return _TIME.validate_python(fields.get("occurred_at")) > self.accepted_at
        except ValidationError:
            return False

    # ---- derived events and dead letters ------------------------------------------------------

    def _derived_from_kept(self, data: Any) -> bool:
        if not isinstance(data, Mapping):
            return False
        if data.get("event_type") == "dead_letter":
            if data.get("original_stream") == self.session_stream:
                sequence = data.get("stream_sequence")
                return isinstance(sequence, int) and sequence > self.cut
            return self._derived_from_kept(json_or_text(str(data.get("payload") or "").encode("utf-8")))
        return (
            data.get("session_id") in self.sessions
            or data.get("episode_id") in self.episodes
            or data.get("source_episode_id") in self.episodes
        )


async def after_cut(
    js: JetStreamContext, subjects: Subjects, owner: Owner, cut: int, accepted_at: datetime, needles: Sequence[Needle]
) -> AfterCut:
    """The owner's sessions above `cut` that state a needle in what was said after the request, read
    from the session stream now."""
    completed = await completed_early(js, subjects, owner, accepted_at)
    early_turns: dict[str, tuple[bool, ...]] = {}
    sessions: set[str] = set()
    subject = subjects.session_completed(owner.tenant_id, owner.user_id)
    async for message in stream_messages(js, subjects.session_stream, subject, from_seq=cut + 1):
        data = json_or_text(message.data)
        if not isinstance(data, Mapping) or not isinstance(data.get("session_id"), str):
            continue
        event_id = str(data.get("event_id"))
        early = completed.get(event_id)
        # Only one whose earlier turns state the value is redacted; otherwise it is an ordinary
        # session accepted after the request.
        if early is not None and text_mentions(early_part(data, early), needles):
            early_turns[event_id] = early
            data = {**data, "messages": later_messages(data.get("messages"), early), "metadata": {}}
        if text_mentions(data, needles):
            sessions.add(data["session_id"])
    return AfterCut(
        session_stream=subjects.session_stream,
        cut=cut,
        accepted_at=accepted_at,
        sessions=frozenset(sessions),
        episodes=frozenset(episode_id_for(owner, session_id) for session_id in sessions),
        early_turns=early_turns,
    )


def later_messages(messages: Any, early: Sequence[bool]) -> list[Any]:
    """The messages of a completed per-turn session appended after the request (a message past the
    recorded times counts as later)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return []
    return [message for index, message in enumerate(messages) if not (index < len(early) and early[index])]


def early_part(data: Any, early: Sequence[bool]) -> Any:
    """What of a completed per-turn session (a stream message's JSON) was said before the request:
    the turns flagged in `early`, and the metadata (set when the session opened, before them)."""
    if not isinstance(data, Mapping):
        return data
    messages = data.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return {"metadata": data.get("metadata")}
    return {
        "messages": [message for index, message in enumerate(messages) if index < len(early) and early[index]],
        "metadata": data.get("metadata"),
    }


async def completed_early(
    js: JetStreamContext, subjects: Subjects, owner: Owner, accepted_at: datetime
) -> dict[str, tuple[bool, ...]]:
    """The owner's per-turn sessions closing or closed (their event id fixed) that hold turns
    appended at or before `accepted_at`: event id -> for each turn, whether it was."""
    store = await open_session_store(js, subjects)
    if store is None:
        return {}
    found: dict[str, tuple[bool, ...]] = {}
    for key in await store.keys(owner):
        stored = await store.get(key.owner, key.session_id)
        if stored is None or stored.record.event_id is None:
            continue
        early = tuple(appended_at <= accepted_at for appended_at in stored.record.turn_appended_at)
        if any(early):
            found[str(stored.record.event_id)] = early
    return found
