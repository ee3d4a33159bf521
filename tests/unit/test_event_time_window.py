"""Every instant the contracts accept is one the pipeline can process, and every other one is refused
with the field's name (contracts/times.py).

The property test draws accepted instants from the whole window, at its edges and with the most
extreme offsets, parses them the way a consumer does (JSON through the contract), and runs the pure
parts of every stage that computes with them: the summarizer's prompt, summary, passages, expiry and
EpisodeCreated; the episode point's payload and what the pruner reads back; the extractor's fact
write plan and the fact point's payload; and recall's ranking. None may raise."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.events import EpisodeCreated, SessionCompleted
from contracts.limits import SizeLimits
from contracts.session_input import SessionRejected, parse_session
from contracts.times import EARLIEST, LATEST
from services.common.domain.facts import FactCandidate, FactProvenance, plan_fact_write
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.stores.episodes import Episode, episode_id_for, episode_payload, read_point_times
from services.common.stores.facts import _fact_payload, read_stored_fact
from services.episodic_summarizer.logic import (
    build_summary_prompt,
    chunk_passages,
    episode_expiry,
    extractive_summary,
    make_abstract,
)
from services.pruner.logic import PrunePolicy, episode_verdict
from services.recall_api.retrieval.ranking import Candidate, memory_weight

_MAX_OFFSET = timedelta(hours=23, minutes=59)


def _record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "event_id": "0b6f3f0e-8a8e-4c43-9a55-1d9f5b0a7c11",
        "tenant_id": "acme",
        "user_id": "alice",
        "agent_id": "bot",
        "session_id": "s1",
        "channel": "private",
        "started_at": "2026-05-02T09:00:00Z",
        "ended_at": "2026-05-02T09:30:00Z",
        "messages": [
            {"role": "user", "content": "I moved to Busan last month and I work on Orion."},
            {"role": "assistant", "content": "Noted: you live in Busan now."},
        ],
    }
    record.update(changes)
    return record


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"ended_at": "9999-12-31T23:59:59Z"}, "ended_at"),
        ({"started_at": "0001-01-01T00:00:00Z"}, "started_at"),
        ({"started_at": "1969-12-31T23:59:59Z"}, "started_at"),
        ({"ended_at": "2200-01-01T00:00:00Z"}, "ended_at"),
        # Inside the window as written, outside it in UTC.
        ({"ended_at": "2199-12-31T23:00:00-05:00"}, "ended_at"),
        ({"started_at": "1970-01-01T00:30:00+01:00"}, "started_at"),
        ({"ended_at": "2026-05-02T08:00:00Z"}, "ended_at"),  # before started_at
        ({"ended_at": "2026-05-02T09:30:00"}, "ended_at"),  # no timezone
        ({"messages": [{"role": "user", "content": "hi there", "ts": "9999-01-01T00:00:00Z"}]}, "messages.0.ts"),
        ({"messages": [{"role": "user", "content": "hi there", "ts": -1}]}, "messages.0.ts"),
    ],
)
def test_an_instant_the_pipeline_cannot_process_is_refused_naming_its_field(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(SessionRejected) as refused:
        parse_session(_record(**changes), SizeLimits())
    assert refused.value.field == field
    assert field in refused.value.reason


def test_the_window_edges_are_accepted() -> None:
    event = parse_session(
        _record(
            started_at="1970-01-01T00:00:00Z",
            ended_at="2199-12-31T23:59:59.999999Z",
            messages=[{"role": "user", "content": "first words here", "ts": "1970-01-01T01:00:00+01:00"}],
        ),
        SizeLimits(),
    )
    assert event.started_at == EARLIEST and event.ended_at == LATEST


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_no_event_carries_nan_or_infinity(number: str) -> None:
    created = _episode_created(datetime(2026, 5, 2, tzinfo=UTC)).model_dump(mode="json")
    text = json.dumps(created).replace('"importance": 0.5', f'"importance": {number}')
    with pytest.raises(ValueError, match="importance"):
        EpisodeCreated.model_validate_json(text)


def _episode_created(occurred_at: datetime) -> EpisodeCreated:
    return EpisodeCreated(
        event_id=UUID(int=1),
        source_event_id=UUID(int=2),
        episode_id=str(UUID(int=3)),
        tenant_id="acme",
        user_id="alice",
        agent_id="bot",
        session_id="s1",
        channel="private",
        scope="personal",
        occurred_at=occurred_at,
        language="en",
        summary="User: I moved to Busan.",
        abstract="User: I moved to Busan.",
        importance=0.5,
    )


def _aware(moment: datetime, offset_minutes: int) -> datetime:
    """`moment` (UTC) written with the given offset; the same instant."""
    return moment.astimezone(timezone(timedelta(minutes=offset_minutes)))


_instants = st.one_of(
    st.sampled_from([EARLIEST, LATEST, EARLIEST + timedelta(microseconds=1), LATEST - timedelta(microseconds=1)]),
    st.datetimes(min_value=EARLIEST.replace(tzinfo=None), max_value=LATEST.replace(tzinfo=None)).map(
        lambda naive: naive.replace(tzinfo=UTC)
    ),
)
_offsets = st.integers(
    min_value=-int(_MAX_OFFSET.total_seconds() // 60), max_value=int(_MAX_OFFSET.total_seconds() // 60)
)
_ttls = st.sampled_from([0.0, 1.0, 365.0, 36_500.0, 1e7, 1e12])


@given(_instants, _instants, _offsets, _offsets, _ttls)
@settings(max_examples=300, deadline=None, database=None)
def test_every_accepted_instant_is_processable(
    first: datetime, second: datetime, start_offset: int, end_offset: int, ttl_days: float
) -> None:
    started, ended = sorted((first, second))
    wire = json.dumps(
        _record(
            started_at=_aware(started, start_offset).isoformat(),
            ended_at=_aware(ended, end_offset).isoformat(),
            messages=[
                {"role": "user", "content": "I moved to Busan and I work on Orion.", "ts": started.isoformat()},
                {"role": "assistant", "content": "Noted: you live in Busan.", "ts": ended.isoformat()},
            ],
        )
    )
    session = SessionCompleted.model_validate_json(wire)
    _summarise(session, ttl_days)


def _summarise(session: SessionCompleted, ttl_days: float) -> None:
    """The summarizer's, extractor's, pruner's and recall's computations on the session's instants."""
    now = datetime.now(UTC)
    build_summary_prompt(session, "en")
    summary = extractive_summary(session.messages, "en")
    chunks = chunk_passages(session.messages)
    owner = Owner(session.tenant_id, session.user_id)
    episode = Episode(
        episode_id=episode_id_for(owner, session.session_id),
        session_id=session.session_id,
        agent_id=session.agent_id,
        occurred_at=session.ended_at,
        expires_at=episode_expiry(session.ended_at, now, ttl_days),
        summary=summary.summary,
        abstract=make_abstract(summary.summary),
        stored_at_ts=now.timestamp(),
    )
    created = _episode_created(episode.occurred_at)
    EpisodeCreated.model_validate_json(created.model_dump_json())
    payload = json.loads(json.dumps(episode_payload(episode)))
    times = read_point_times(episode.episode_id, payload)
    episode_verdict(times, now, PrunePolicy.from_days(90, 30))
    assert [episode.passage(c.index, c.text, first_turn=c.first_turn, last_turn=c.last_turn) for c in chunks]
    fact = _planned_fact(session, now)
    stored = read_stored_fact(fact.fact_id, json.loads(json.dumps(_fact_payload(fact, ["private"]))))
    assert stored is not None
    for candidate in (
        Candidate(id=episode.episode_id, kind="episode", relevance=0.9, episode=episode),
        Candidate(id=fact.fact_id, kind="fact", relevance=0.9, fact=fact),
    ):
        weight, _ = memory_weight(
            candidate, now=now, episode_half_life_days=30.0, episode_recency_weight=0.3, importance_weight=0.2
        )
        assert 0.0 <= weight <= 1.0


def _planned_fact(session: SessionCompleted, now: datetime) -> Any:
    provenance = FactProvenance(
        episode_id=str(deterministic_uuid("episode", session.session_id)),
        session_id=session.session_id,
        occurred_at=session.ended_at,
        source="extraction",
    )
    candidate = FactCandidate(
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        scope="personal",
        subject="user",
        attribute="lives_in",
        value="Busan",
        text="The user lives in Busan.",
        language="en",
        provenance=provenance,
    )
    plan = plan_fact_write(candidate, [], now=now)
    (fact,) = [f for f in plan.upserts if f.fact_id == plan.fact_id]
    return fact
