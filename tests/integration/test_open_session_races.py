"""The races of per-turn sessions, against a real nats-server: two replicas closing one session
publish one event; a closer that stopped half way (the record left `closing`) is finished by the next
sweep; a whole-user erasure that removes the record while it is closing leaves no event behind
(its turns were accepted before the erasure); an open session that gets a turn is not closed as idle."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client as NatsClient
from nats.js.api import PubAck

from contracts import SessionCompleted, SizeLimits, Subjects
from contracts.session_input import SessionRejected
from services.common.domain.owner import Owner
from services.common.runtime.provisioning import provision
from services.common.runtime.settings import NatsSettings
from services.common.stores.open_sessions import SessionKey
from services.recall_api.write.turn_schemas import TurnIn, TurnsRequest
from services.recall_api.write.turns_in import OpenSessions

pytestmark = pytest.mark.integration

HANA = Owner("acme", "hana")


def _sessions(
    settings: NatsSettings, client: NatsClient, idle_s: float = 3600, limits: SizeLimits | None = None
) -> OpenSessions:
    async def nats() -> NatsClient:
        return client

    subjects = Subjects(settings.subject_root)
    return OpenSessions(nats, subjects, limits or SizeLimits(), idle_s=idle_s, sweep_s=0.1, closed_keep_s=3600)


def _turns(*texts: str) -> TurnsRequest:
    return TurnsRequest(messages=[TurnIn(role="user", content=text) for text in texts])


async def _published(settings: NatsSettings, client: NatsClient) -> int:
    info = await client.jetstream().stream_info(Subjects(settings.subject_root).session_stream)
    return int(info.state.messages)


@pytest.fixture
async def provisioned(nats_settings: NatsSettings, nats_client: NatsClient) -> NatsSettings:
    await provision(nats_client.jetstream(), nats_settings)
    return nats_settings


async def test_two_replicas_closing_one_session_publish_one_event(
    provisioned: NatsSettings, nats_client: NatsClient
) -> None:
    first, second = _sessions(provisioned, nats_client), _sessions(provisioned, nats_client)
    await first.append(HANA, "s1", _turns("I moved to Busan.", "The sea is close."))
    ended = await asyncio.gather(first.end(HANA, "s1"), second.end(HANA, "s1"), second.end(HANA, "s1"))
    assert all(result is not None for result in ended)
    assert len({result.event_id for result in ended if result is not None}) == 1
    assert await _published(provisioned, nats_client) == 1
    view = await first.read(HANA, "s1")
    assert view is not None and view.state == "closed" and view.turns == [] and view.turn_count == 2


async def test_a_sweep_finishes_a_session_left_closing(provisioned: NatsSettings, nats_client: NatsClient) -> None:
    sessions = _sessions(provisioned, nats_client)
    await sessions.append(HANA, "s2", _turns("My cat is called Mochi."))
    store = await sessions.store()

    async def crash_after_closing(event: SessionCompleted) -> PubAck:
        raise RuntimeError("the closer crashed after closing")

    original = sessions._publish
    sessions._publish = crash_after_closing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await sessions.end(HANA, "s2")
    sessions._publish = original  # type: ignore[method-assign]
    left = await store.get(HANA, "s2")
    assert left is not None and left.record.state == "closing" and await _published(provisioned, nats_client) == 0

    assert await sessions.sweep() == 1  # not idle, but closing: finished at once
    view = await sessions.read(HANA, "s2")
    assert view is not None and view.state == "closed" and view.event_id == str(left.record.event_id)
    assert await _published(provisioned, nats_client) == 1


async def test_an_erasure_while_closing_leaves_no_event_and_later_turns_stay(
    provisioned: NatsSettings, nats_client: NatsClient
) -> None:
    sessions = _sessions(provisioned, nats_client)
    await sessions.append(HANA, "s3", _turns("My passport number ends in 4711."))
    await sessions.append(HANA, "s3-other", _turns("And my bank is in Seoul."))
    original = sessions._publish

    async def erased_meanwhile(event: SessionCompleted) -> PubAck:
        ack = await original(event)
        assert await sessions.erase_user(HANA) == 2  # the user's erasure lands between publish and closed
        await sessions.append(HANA, "s3", _turns("Hello again."))  # after the erasure: a new session
        return ack

    sessions._publish = erased_meanwhile  # type: ignore[method-assign]
    assert await sessions.end(HANA, "s3") is None
    assert await _published(provisioned, nats_client) == 0, "an event of erased turns was left in the stream"
    view = await sessions.read(HANA, "s3")
    assert view is not None and view.state == "open" and [t.content for t in view.turns] == ["Hello again."]
    # The erased keys are gone from every listing: the idle closer sees the one session accepted after.
    assert [key.session_id for key in await (await sessions.store()).keys()] == ["s3"]
    assert await sessions.read(HANA, "s3-other") is None


async def test_the_idle_closer_leaves_a_session_that_just_got_a_turn(
    provisioned: NatsSettings, nats_client: NatsClient
) -> None:
    sessions = _sessions(provisioned, nats_client, idle_s=0.2)
    await sessions.append(HANA, "s4", _turns("Planning a trip to Jeju."))
    idle_before = datetime.now(UTC) - timedelta(seconds=5)  # a sweep that read the clock before the turn
    assert await sessions.close(SessionKey(HANA, "s4"), "idle", idle_before=idle_before) is None
    await asyncio.sleep(0.3)
    assert await sessions.sweep() == 1
    view = await sessions.read(HANA, "s4")
    assert view is not None and view.state == "closed" and view.closed_by == "idle"
    other = Owner("acme", "other")
    assert await sessions.read(other, "s4") is None and await sessions.end(other, "s4") is None


async def test_a_record_is_held_to_the_byte_limit_with_its_turn_ids(
    provisioned: NatsSettings, nats_client: NatsClient
) -> None:
    """The turn ids are not part of the event: a session whose event fits the limit can still have a
    record that does not (which the broker would refuse with a 5xx's worth of error)."""
    sessions = _sessions(provisioned, nats_client, limits=SizeLimits(max_event_bytes=2048))
    long_ids = [TurnIn(role="user", content=f"turn {i}", turn_id=f"{i}-" + "x" * 120) for i in range(10)]
    request = TurnsRequest(messages=long_ids)
    event = SessionCompleted.model_validate(
        {
            "event_id": "00000000-0000-0000-0000-000000000001",
            "tenant_id": "acme",
            "user_id": "hana",
            "agent_id": "default",
            "session_id": "s5",
            "channel": "private",
            "started_at": "2026-05-02T00:00:00Z",
            "ended_at": "2026-05-02T00:00:00Z",
            "messages": [turn.message().model_dump(exclude_none=True) for turn in long_ids],
        }
    )
    assert len(event.model_dump_json()) < 2048 - 200, "the event alone fits the limit"
    with pytest.raises(SessionRejected) as refused:
        await sessions.append(HANA, "s5", request)
    assert refused.value.too_large and refused.value.field == "messages"
    assert await sessions.read(HANA, "s5") is None
