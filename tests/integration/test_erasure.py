"""Erasure against real nats-server, FalkorDB and Qdrant Edge: a whole user (the other user is left
exactly as before), one fact (the summary is rebuilt from the redacted raw session by the real
episodic-summarizer), and a pruner killed mid-erasure that finishes after a restart."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from contracts import ErasureCompleted, ErasureRequested, ErasureTarget, SessionCompleted, Subjects
from services.cli.audit import audit_app, run_audit
from services.cli.stack import RunningServices, start_services
from services.common.domain.facts import FactCandidate, FactProvenance, make_fact_id
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import NatsSettings, TierMemSettings, VectorSettings
from services.common.stores.erasure import AuditReport, audit_user
from services.common.stores.graph.repository import EntityInput, EpisodeRef, GraphRepository, RelationInput, entity_key
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, HybridWeights, SearchFilter, VectorRecord
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC_DEFINITION
from services.pruner.handlers import DEFINITION as PRUNER_DEFINITION
from services.pruner.handlers import build_definition
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC_DEFINITION
from tests.fixtures.falkordb import FalkorDBGraph
from tests.support.events import decoded, session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration

ALICE = Owner("acme", "alice")
BOB = Owner("acme", "bob")
ENDED = datetime(2026, 5, 2, 10, 0, tzinfo=UTC)


def _settings(tmp_path: Path, nats_settings: NatsSettings, graph: FalkorDBGraph, **nats: Any) -> TierMemSettings:
    return TierMemSettings(
        data_dir=tmp_path,
        nats=nats_settings.model_copy(update=nats),
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=graph.settings(),
    )


@dataclass
class Stack:
    settings: TierMemSettings
    subjects: Subjects
    js_client: NatsClient
    running: RunningServices | None = None

    @property
    def resources(self) -> Resources:
        assert self.running is not None
        return self.running.resources

    async def start(self, definitions: list[ServiceDefinition[Any]]) -> None:
        self.running = await start_services(self.settings, definitions, resources=Resources(self.settings))

    async def stop(self) -> None:
        if self.running is not None:
            running, self.running = self.running, None
            await running.stop()

    async def publish(self, event: Any, subject: str, stream: str) -> None:
        assert self.running is not None
        publisher = next(iter(self.running.contexts.values())).publisher
        await publisher.publish(event, subject, message_id(event), stream)

    async def ingest(self, event: SessionCompleted) -> None:
        await self.publish(
            event, self.subjects.session_completed(event.tenant_id, event.user_id), self.subjects.session_stream
        )

    async def request_erasure(self, owner: Owner, target: ErasureTarget) -> ErasureRequested:
        request = ErasureRequested(
            event_id=uuid.uuid4(),
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            target=target,
            requested_at=datetime.now(UTC),
            reason="test",
        )
        await self.publish(
            request, self.subjects.erasure_requested(owner.tenant_id, owner.user_id), self.subjects.derived_stream
        )
        return request

    async def completed(self, owner: Owner, timeout_s: float = 30.0) -> ErasureCompleted:
        js = self.js_client.jetstream()
        subject = self.subjects.erasure_completed(owner.tenant_id, owner.user_id)
        found = await wait_for(
            lambda: stream_messages(js, self.subjects.derived_stream, subject),
            timeout_s=timeout_s,
            what="ErasureCompleted",
        )
        return ErasureCompleted.model_validate_json(found[-1].data)

    async def audit(self, owner: Owner) -> AuditReport:
        return await audit_user(
            index=await self.resources.vector_index(),
            graph=await self.resources.graph(),
            js=self.js_client.jetstream(),
            subjects=self.subjects,
            owner=owner,
        )

    async def episodes(self, owner: Owner) -> list[Any]:
        index = await self.resources.vector_index()
        return await index.scroll(EPISODES, owner, SearchFilter(), 1000)


@pytest.fixture
async def stack(
    tmp_path: Path, nats_settings: NatsSettings, falkordb_graph: FalkorDBGraph, nats_client: NatsClient
) -> AsyncIterator[Stack]:
    built = Stack(_settings(tmp_path, nats_settings, falkordb_graph), Subjects(nats_settings.subject_root), nats_client)
    try:
        yield built
    finally:
        await built.stop()


async def _wait_episodes(stack: Stack, owner: Owner, count: int) -> None:
    async def probe() -> bool:
        return len(await stack.episodes(owner)) == count

    await wait_for(probe, timeout_s=60, what=f"{count} episodes of {owner.user_id}")


async def _add_fact(
    stack: Stack, owner: Owner, episode: Any, attribute: str, value: str, text: str, scope: str = "personal"
) -> str:
    candidate = FactCandidate(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        scope=scope,  # type: ignore[arg-type]
        subject="user",
        attribute=attribute,
        value=value,
        text=text,
        language="en",
        provenance=FactProvenance(
            episode_id=episode.id,
            session_id=episode.payload["session_id"],
            occurred_at=ENDED,
            source="extraction",
        ),
    )
    result = await (await stack.resources.facts()).write(owner, candidate, channel="private", now=ENDED)
    assert result.plan.fact_id is not None, result.plan.rejected_reason
    return result.plan.fact_id


async def _add_graph(stack: Stack, owner: Owner, episode: Any, personal: list[str], team: list[str]) -> None:
    graph = await stack.resources.graph()
    ref = EpisodeRef(episode_id=episode.id, session_id=episode.payload["session_id"], occurred_at_ts=ENDED.timestamp())
    await graph.upsert_entities(owner, "personal", [EntityInput(name, "other") for name in personal], episode=ref)
    await graph.upsert_entities(owner, "team", [EntityInput(name, "project") for name in team], episode=ref)
    if personal and team:
        relation = RelationInput(
            entity_key(owner, "personal", personal[0]), "works_on", entity_key(owner, "team", team[0])
        )
        await graph.upsert_relations(owner, "personal", [relation], episode=ref)


async def _dead_letter_for(stack: Stack, owner: Owner) -> None:
    """A poison message on the user's session subject: the episodic-summarizer dead-letters it."""
    js = stack.js_client.jetstream()
    await js.publish(stack.subjects.session_completed(owner.tenant_id, owner.user_id), b'{"not": "a session"}')


async def _ingest_user(stack: Stack, owner: Owner, topic: str) -> list[Any]:
    sessions = [
        session_event(
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            session_id=f"{owner.user_id}-{index}",
            ended_at=ENDED,
            texts=[
                f"We decided to build the {topic} service in Go and ship it by June {10 + index}.",
                f"Noted. I will prepare the migration plan for the {topic} service.",
            ],
        )
        for index in range(2)
    ]
    for event in sessions:
        await stack.ingest(event)
    await _wait_episodes(stack, owner, len(sessions))
    episodes = await stack.episodes(owner)
    await _add_fact(stack, owner, episodes[0], "works_on", topic, f"The user works on {topic}.")
    await _add_graph(stack, owner, episodes[0], personal=[f"{owner.user_id} notebook"], team=["DGIA"])
    await _dead_letter_for(stack, owner)
    return episodes


async def _wait_dead_letters(stack: Stack, owner: Owner) -> None:
    js = stack.js_client.jetstream()
    await wait_for(
        lambda: stream_messages(
            js, stack.subjects.dead_letter_stream, stack.subjects.user_dead_letters(owner.tenant_id, owner.user_id)
        ),
        what=f"a dead letter of {owner.user_id}",
    )


async def test_erasing_a_user_leaves_no_trace_and_the_other_user_untouched(stack: Stack) -> None:
    await stack.start([EPISODIC_DEFINITION, PRUNER_DEFINITION])
    await _ingest_user(stack, ALICE, "DGIA billing")
    await _ingest_user(stack, BOB, "Onbiseo search")
    await _wait_dead_letters(stack, ALICE)
    await _wait_dead_letters(stack, BOB)

    alice_before = await stack.audit(ALICE)
    bob_before = await stack.audit(BOB)
    # Every store holds something of alice, or the test would prove nothing.
    assert all(alice_before.traces()[name] > 0 for name in ("vectors.episodes", "vectors.passages", "vectors.facts"))
    assert alice_before.graph["nodes"] >= 2
    assert alice_before.graph["edges"] >= 1
    assert alice_before.session_messages == 3  # two sessions and the poison message
    assert alice_before.derived_events.get("episode.created") == 2
    assert alice_before.dead_letters == 1

    request = await stack.request_erasure(ALICE, ErasureTarget(kind="user"))
    completed = await stack.completed(ALICE)

    assert completed.request_event_id == request.event_id
    assert completed.removed["session_messages"] == 3
    assert completed.removed["episodes"] == 2
    assert completed.removed["facts"] == 1
    assert completed.removed["dead_letters"] == 1
    assert completed.removed["derived_events"] == 2
    assert completed.removed["graph_entities_deleted"] >= 1  # alice's personal node
    assert completed.removed["graph_entities_updated"] >= 1  # the shared team node lost alice only

    alice_after = await stack.audit(ALICE)
    assert alice_after.clean, alice_after.traces()
    assert alice_after.erasure_records == 2  # the request and the completion stay as proof
    assert await stack.audit(BOB) == bob_before

    graph = await stack.resources.graph()
    shared = await graph.get_entity(BOB, entity_key(BOB, "team", "DGIA"))
    assert shared is not None
    assert shared.user_ids == ("bob",)

    # The CLI asks the running pruner (it owns the Edge shards): exit 0 for alice, 1 for bob.
    data_dir = stack.settings.data_dir
    (data_dir / "stack.json").write_text(json.dumps(_stack_file(stack.settings)), encoding="utf-8")
    runner, cli = CliRunner(), typer.Typer()
    cli.add_typer(audit_app, name="audit")
    clean = await asyncio.to_thread(runner.invoke, cli, ["audit", "user", "acme", "alice", "--data-dir", str(data_dir)])
    assert clean.exit_code == 0, clean.output
    assert "no traces remain" in clean.output
    dirty = await asyncio.to_thread(runner.invoke, cli, ["audit", "user", "acme", "bob", "--data-dir", str(data_dir)])
    assert dirty.exit_code == 1, dirty.output
    assert "vectors.episodes" in dirty.output


async def _entity_from(graph: GraphRepository, name: str, episode_id: str) -> bool:
    return any(episode_id in entity.episode_ids for entity in await graph.search_entities(ALICE, name))


def _stack_file(settings: TierMemSettings) -> dict[str, Any]:
    assert settings.nats.token is not None
    assert settings.graph.password is not None
    return {
        "nats": {
            "url": settings.nats.url,
            "token": settings.nats.token.get_secret_value(),
            "subject_root": settings.nats.subject_root,
        },
        "graph": {
            "backend": "falkordb",
            "host": settings.graph.host,
            "port": settings.graph.port,
            "password": settings.graph.password.get_secret_value(),
            "graph_name": settings.graph.graph_name,
        },
        "vector": {"backend": "edge", "path": str(settings.vector.path)},
    }


async def test_erasing_a_fact_rebuilds_the_summary_from_the_redacted_raw_session(stack: Stack) -> None:
    # The whole write path: summarizer → extractor (facts, entities) → pruner.
    await stack.start([EPISODIC_DEFINITION, SEMANTIC_DEFINITION, PRUNER_DEFINITION])
    statement = "I moved to Busan last month, so I now live in Busan."
    original = session_event(
        tenant_id="acme",
        user_id="alice",
        session_id="moving",
        ended_at=ENDED,
        texts=[
            f"{statement} We decided to build the DGIA billing service in Go by June 30.",
            "Noted. Busan is lovely. I will prepare the migration plan for the DGIA billing service.",
        ],
    )
    other = session_event(
        tenant_id="acme",
        user_id="alice",
        session_id="planning",
        ended_at=ENDED,
        texts=["The Onbiseo search team reviews the ranking change on Friday.", "Noted, Friday review it is."],
    )
    await stack.ingest(original)
    await stack.ingest(other)
    await _wait_episodes(stack, ALICE, 2)
    episode = next(e for e in await stack.episodes(ALICE) if e.payload["session_id"] == "moving")
    other_episode = next(e for e in await stack.episodes(ALICE) if e.payload["session_id"] == "planning")
    index = await stack.resources.vector_index()
    graph = await stack.resources.graph()
    passages = await index.scroll(PASSAGES, ALICE, SearchFilter(match={"episode_id": episode.id}), 100)
    assert "Busan" in episode.payload["summary"] + " ".join(p.payload["text"] for p in passages)

    # The extractor found the fact and the entities in the raw session.
    busan = make_fact_id("acme", "alice", "personal", "user", "lives_in", "Busan")
    await wait_for(lambda: index.get(FACTS, ALICE, [busan]), what="the extracted Busan fact")
    await wait_for(lambda: graph.search_entities(ALICE, "Busan"), what="the extracted Busan entity")
    await wait_for(lambda: _entity_from(graph, "DGIA", episode.id), what="the DGIA entity of the episode")
    go = await _add_fact(stack, ALICE, episode, "uses_language", "Go", "The user builds services in Go.")

    await stack.request_erasure(ALICE, ErasureTarget(kind="fact", item_id=busan))
    completed = await stack.completed(ALICE)
    assert completed.removed["sessions_rebuilt"] == 1
    assert completed.removed["session_messages"] == 1
    assert completed.removed["facts"] == 1
    assert completed.removed["derived_events"] >= 2  # the old EpisodeCreated and the Busan EntityUpserted

    # The episodic-summarizer rebuilds the same episode id from the redacted raw session...
    async def rebuilt() -> Any:
        found = await index.get(EPISODES, ALICE, [episode.id])
        if found and found[0].payload["source_event_id"] != str(original.event_id):
            return found[0]
        return None

    new_episode = await wait_for(rebuilt, timeout_s=30, what="the rebuilt episode")
    assert "Busan" not in json.dumps(new_episode.payload, ensure_ascii=False)
    assert "DGIA" in new_episode.payload["summary"]  # the rest of the session is still remembered
    assert (await index.get(EPISODES, ALICE, [other_episode.id]))[0].payload == other_episode.payload
    # ...and the extractor re-derives the graph from it: DGIA comes back, Busan does not.
    await wait_for(lambda: _entity_from(graph, "DGIA", episode.id), what="DGIA re-extracted from the rebuilt episode")

    # Stores: no point mentions the erased text; the unrelated fact stays.
    for collection in (EPISODES, PASSAGES, FACTS):
        for record in await index.scroll(collection, ALICE, SearchFilter(), 1000):
            assert "Busan" not in json.dumps(record.payload, ensure_ascii=False), (collection, record.id)
    assert not await index.get(FACTS, ALICE, [busan])
    assert await index.get(FACTS, ALICE, [go])

    # Search: hybrid queries for the erased text return nothing that mentions it.
    embedder, keywords = stack.resources.embedder(), stack.resources.keywords()
    for query in ("Busan", "Where does the user live?"):
        dense = await embedder.embed_query(query)
        for collection in (EPISODES, PASSAGES, FACTS):
            hits = await index.hybrid_query(
                collection,
                ALICE,
                dense=dense,
                sparse=keywords.encode_query(query),
                weights=HybridWeights(keyword=0.5, dense=0.5),
                limit=10,
            )
            assert all("Busan" not in json.dumps(hit.payload, ensure_ascii=False) for hit in hits)

    # Expand: the raw session behind the rebuilt episode is the redacted copy.
    js = stack.js_client.jetstream()
    raw = await js.get_msg(stack.subjects.session_stream, new_episode.payload["raw_stream_sequence"])
    redacted = SessionCompleted.model_validate_json(raw.data or b"")
    assert redacted.session_id == "moving"
    assert "Busan" not in (raw.data or b"").decode()
    assert any("DGIA" in m.content for m in redacted.messages)
    for stream in (stack.subjects.session_stream, stack.subjects.derived_stream, stack.subjects.dead_letter_stream):
        for payload in decoded(await stream_messages(js, stream)):
            assert "Busan" not in json.dumps(payload, ensure_ascii=False), stream

    # Graph: the entity only that statement supported is gone; nothing named Busan is reachable.
    assert await graph.search_entities(ALICE, "Busan") == []
    assert (await graph.neighbourhood(ALICE, name="Busan")).entities == []


async def test_pruner_killed_mid_erasure_finishes_after_restart(stack: Stack, nats_settings: NatsSettings) -> None:
    # Short ack wait: a killed worker's message comes back after ~2 s instead of minutes.
    stack.settings = stack.settings.model_copy(update={"nats": nats_settings.model_copy(update={"ack_wait_s": 2.0})})
    killed = asyncio.Event()
    steps_seen: list[str] = []

    async def kill_after_vectors(step: str) -> None:
        steps_seen.append(step)
        if step == "vectors":
            killed.set()
            # The worker dies here: no ack, no nak, the rest of the steps never run.
            raise asyncio.CancelledError

    crashing = build_definition(after_step=kill_after_vectors)
    await stack.start([EPISODIC_DEFINITION, crashing])
    await _ingest_user(stack, ALICE, "DGIA billing")
    await _ingest_user(stack, BOB, "Onbiseo search")
    await _wait_dead_letters(stack, ALICE)
    bob_before = await stack.audit(BOB)

    await stack.request_erasure(ALICE, ErasureTarget(kind="user"))
    await asyncio.wait_for(killed.wait(), timeout=30)
    assert steps_seen == ["tombstone", "drain", "session_stream", "derived_events", "dead_letters", "vectors"]
    half_done = await stack.audit(ALICE)
    assert half_done.graph["nodes"] > 0, "the crash happened before the graph step"
    await stack.stop()

    await stack.start([EPISODIC_DEFINITION, PRUNER_DEFINITION])
    completed = await stack.completed(ALICE, timeout_s=30)
    # Counts survive the crash: the first delivery's removals are included.
    assert completed.removed["session_messages"] == 3
    assert completed.removed["episodes"] == 2
    assert completed.removed["graph_entities_deleted"] >= 1
    after = await stack.audit(ALICE)
    assert after.clean, after.traces()
    assert await stack.audit(BOB) == bob_before


async def test_erasing_an_episode_removes_its_session_and_fact_provenance(stack: Stack) -> None:
    await stack.start([EPISODIC_DEFINITION, PRUNER_DEFINITION])
    episodes = await _ingest_user(stack, ALICE, "DGIA billing")
    doomed, kept = episodes[0], episodes[1]
    only_here = await _add_fact(stack, ALICE, doomed, "likes", "ramen", "The user likes ramen.")
    shared = await _add_fact(stack, ALICE, doomed, "speaks_language", "Korean", "The user speaks Korean.")
    await _add_fact(stack, ALICE, kept, "speaks_language", "Korean", "The user speaks Korean.")

    await stack.request_erasure(ALICE, ErasureTarget(kind="episode", item_id=doomed.id))
    completed = await stack.completed(ALICE)
    assert completed.removed["session_messages"] == 1
    assert completed.removed["facts_updated"] == 1

    index = await stack.resources.vector_index()
    assert not await index.get(EPISODES, ALICE, [doomed.id])
    assert await index.count(PASSAGES, ALICE, SearchFilter(match={"episode_id": doomed.id})) == 0
    assert await index.get(EPISODES, ALICE, [kept.id])
    assert not await index.get(FACTS, ALICE, [only_here])
    survivor = (await index.get(FACTS, ALICE, [shared]))[0].payload
    assert survivor["episode_ids"] == [kept.id]
    assert survivor["evidence_count"] == 1

    js = stack.js_client.jetstream()
    raw = decoded(
        await stream_messages(js, stack.subjects.session_stream, stack.subjects.session_completed("acme", "alice"))
    )
    assert {payload.get("session_id") for payload in raw} == {kept.payload["session_id"], None}  # None: the poison
    derived = decoded(
        await stream_messages(js, stack.subjects.derived_stream, stack.subjects.episode_created("acme", "alice"))
    )
    assert [payload["episode_id"] for payload in derived] == [kept.id]
    graph = await stack.resources.graph()
    assert await graph.search_entities(ALICE, "alice notebook") == []


async def test_erasure_redelivered_after_completion_publishes_the_same_record(stack: Stack) -> None:
    await stack.start([PRUNER_DEFINITION])
    request = await stack.request_erasure(ALICE, ErasureTarget(kind="user"))
    first = await stack.completed(ALICE)
    assert first.removed.get("session_messages", 0) == 0
    # The same request delivered again (as after a lost ack): under another Nats-Msg-Id so the stream
    # keeps it. The pruner answers with the stored completion, which the stream de-duplicates.
    assert stack.running is not None
    publisher = stack.running.contexts["pruner"].publisher
    subject = stack.subjects.erasure_requested("acme", "alice")
    await publisher.publish(request, subject, message_id(request, "replay"), stack.subjects.derived_stream)
    js = stack.js_client.jetstream()

    async def replay_handled() -> bool:
        info = await js.consumer_info(stack.subjects.derived_stream, "pruner-erasure")
        return bool(info.num_ack_pending == 0 and info.delivered.stream_seq >= 3)

    await wait_for(replay_handled, what="the replayed request to be acked")
    completed_subject = stack.subjects.erasure_completed("acme", "alice")
    completions = await stream_messages(js, stack.subjects.derived_stream, completed_subject)
    assert [ErasureCompleted.model_validate_json(m.data or b"") for m in completions] == [first]

    # A new request is a new erasure with its own record.
    again = await stack.request_erasure(ALICE, ErasureTarget(kind="user"))

    async def two_completions() -> list[Any]:
        found = await stream_messages(js, stack.subjects.derived_stream, completed_subject)
        return found if len(found) == 2 else []

    found = await wait_for(two_completions, what="a second completion")
    assert {json.loads(m.data)["request_event_id"] for m in found} == {str(request.event_id), str(again.event_id)}


async def test_cli_audit_without_a_running_pruner_opens_the_stores_itself(
    tmp_path: Path, nats_settings: NatsSettings, falkordb_graph: FalkorDBGraph, nats_client: NatsClient
) -> None:
    settings = _settings(tmp_path, nats_settings, falkordb_graph)
    resources = Resources(settings)
    try:
        index = await resources.vector_index()
        record_owner = Owner("acme", "carol")
        embedder = resources.embedder()
        dense = (await embedder.embed_passages(["carol likes tea"]))[0]
        await index.upsert(
            FACTS,
            record_owner,
            [
                VectorRecord(
                    id=str(uuid.uuid4()),
                    dense=dense,
                    sparse=resources.keywords().encode_document("tea"),
                    payload={"kind": "fact"},
                )
            ],
        )
    finally:
        await resources.close()
    report = await run_audit(settings, Owner("acme", "carol"), timeout_s=5)
    assert report.vectors[FACTS] == 1
    assert report.remaining == 1
    assert (await run_audit(settings, Owner("acme", "dave"), timeout_s=5)).clean


async def test_erasure_of_an_id_that_cannot_exist_is_dead_lettered_at_once(stack: Stack) -> None:
    await stack.start([PRUNER_DEFINITION])
    await stack.request_erasure(ALICE, ErasureTarget(kind="fact", item_id="not-a-uuid"))
    js = stack.js_client.jetstream()
    dead = await wait_for(
        lambda: stream_messages(
            js, stack.subjects.dead_letter_stream, stack.subjects.user_dead_letters("acme", "alice")
        ),
        what="the dead-lettered request",
    )
    record = json.loads(dead[0].data)
    assert record["kind"] == "poison"
    assert record["deliveries"] == 1
    assert "not a UUID" in record["reason"]
