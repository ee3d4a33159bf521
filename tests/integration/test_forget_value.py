"""Forgetting one fact forgets its value wherever it reached (issue 48, item 2), on the path users run:
sessions posted over HTTP, the real episodic-summarizer, semantic-extractor, dedup and pruner in-process
on real nats-server, FalkorDB and Qdrant Edge, then `DELETE /v1/memories/{fact_id}`.

The value is stated by the user ("I'm allergic to Xanthorrhoea nuts") and repeated by the assistant in
other words ("Noted: vegetarian, Xanthorrhoea allergy"); a second session spells it differently
("Xanthorhoea"), so dedup folds that entity into the first as an alias. After the erasure neither
spelling is anywhere: every read route, every MCP tool, the /ui pages, the raw session stream (both
roles), the derived and dead-letter streams, the vector payloads and keyword vectors, the graph, the
dump, and the value audit (`tiermem audit value`) counts 0. Facts and memories that only share a word
with the value ("pine nuts", "peanut butter", "allergy") are kept."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import typer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent
from typer.testing import CliRunner

from contracts import Subjects
from services.cli.audit import audit_app
from services.cli.stack import RunningServices, start_services
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings, VectorSettings
from services.common.stores.snapshot import snapshot, to_json
from services.common.stores.value_places import DEFAULT_SCAN_LIMIT, PlaceStores, ValueAudit, audit_value
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.pruner.handlers import DEFINITION as PRUNER
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import API_KEYS, serving
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event, stream_messages, wait_for

pytestmark = pytest.mark.integration

ACME_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "acme")
CAROL = Owner("acme", "carol")
DAVE = Owner("acme", "dave")
NOW = datetime.now(UTC)
VALUE = "Xanthorrhoea"
VARIANT = "Xanthorhoea"  # the second session's spelling: dedup merges it into VALUE's entity as an alias

STATED = [
    f"I'm allergic to {VALUE} nuts. I'm vegetarian, and I love peanut butter on toast.",
    f"Noted: vegetarian, {VALUE} allergy. Peanut butter toast sounds like a good breakfast.",
]
SPELLED_DIFFERENTLY = [
    f"My {VARIANT} allergy is why I skipped the Mekong Kitchen dinner with Priya Raman.",
    f"Understood, I'll avoid {VARIANT} dishes. Priya Raman can pick another place.",
]
SHARES_A_WORD = [
    "I'm allergic to pine nuts too, so pesto is out. The allergy clinic is on Tuesday.",
    "Got it: no pine nuts, and the allergy clinic visit is Tuesday.",
]


@dataclass
class ForgetStack:
    settings: RecallApiSettings
    resources: Resources
    running: RunningServices
    http: httpx.AsyncClient
    subjects: Subjects
    base_url: str

    async def post(self, session_id: str, texts: list[str], hours_ago: int, owner: Owner = CAROL) -> str:
        event = session_event(
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            session_id=session_id,
            texts=texts,
            ended_at=NOW - timedelta(hours=hours_ago),
        )
        response = await self.http.post("/v1/sessions", content=event.model_dump_json())
        assert response.status_code == 202, response.text
        return str(event.event_id)

    async def state(self, event_id: str, state: str, user_id: str = "carol") -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            response = await self.http.get(f"/v1/events/{event_id}", params={"user_id": user_id})
            found: dict[str, Any] = response.json()
            return found if response.status_code == 200 and found["state"] == state else None

        result: dict[str, Any] = await wait_for(reached, timeout_s=120, what=f"event {event_id} {state}")
        return result

    async def facts(self, user_id: str = "carol") -> list[dict[str, Any]]:
        response = await self.http.get("/v1/memories", params={"user_id": user_id, "kind": "fact", "limit": 500})
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    async def audit(self, text: str, owner: Owner = CAROL) -> ValueAudit:
        """`tiermem audit value TEXT --tenant T --user U`, on the running stack's own stores."""
        stores = PlaceStores(
            subjects=self.subjects,
            js=(await self.resources.nats()).jetstream(),
            index=await self.resources.vector_index(),
            graph=await self.resources.graph(),
            keywords=self.resources.keywords(),
            scan_limit=DEFAULT_SCAN_LIMIT,
        )
        return await audit_value(stores, text, tenant_id=owner.tenant_id, user_id=owner.user_id)


@pytest.fixture
async def forget_stack(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[ForgetStack]:
    settings = RecallApiSettings(
        data_dir=tmp_path,
        nats=nats_settings,
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=falkordb_graph.settings(),
        api_keys=API_KEYS,
    )
    resources = Resources(settings, _embedder=embedder, _keywords=keywords)
    running = await start_services(settings, [EPISODIC, SEMANTIC, DEDUP, PRUNER], resources=resources)
    app = create_app(settings, resources)
    try:
        async with serving(app, over_http=True) as base_url:
            assert base_url is not None
            headers = {"Authorization": f"Bearer {ACME_KEY}", "content-type": "application/json"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
                yield ForgetStack(settings, resources, running, http, Subjects(nats_settings.subject_root), base_url)
    finally:
        await running.stop()


@contextlib.asynccontextmanager
async def _mcp(stack: ForgetStack) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ACME_KEY}"}, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http)) as client:
        yield client


def _leaks(text: str) -> list[str]:
    """The spellings of the value found in `text`, case-insensitively."""
    return [spelling for spelling in (VALUE, VARIANT) if spelling.casefold() in text.casefold()]


async def _read_routes(stack: ForgetStack, episode_ids: list[str], fact_ids: list[str]) -> dict[str, str]:
    """What every read route answers about carol, by route."""
    http, user = stack.http, {"user_id": "carol"}
    answers: dict[str, str] = {}
    for query in (VALUE, f"{VALUE} allergy", "What is carol allergic to?", VARIANT):
        answers[f"L1 {query}"] = (await http.post("/v1/memories/search", json={**user, "query": query})).text
        answers[f"L2 {query}"] = (await http.post("/v1/graph/search", json={**user, "query": query, "hops": 2})).text
        auto = await http.post("/v1/recall/auto", json={**user, "message": f"Can I eat {query}?"})
        answers[f"L0 {query}"] = auto.text
    answers["listing"] = (await http.get("/v1/memories", params={**user, "limit": 500})).text
    answers["facts"] = (await http.get("/v1/facts", params=user)).text
    answers["procedures"] = (await http.get("/v1/procedures", params={**user, "query": VALUE})).text
    for memory_id in [*episode_ids, *fact_ids]:
        answers[f"memory {memory_id}"] = (await http.get(f"/v1/memories/{memory_id}", params=user)).text
    for fact_id in fact_ids:
        answers[f"history {fact_id}"] = (await http.get(f"/v1/facts/{fact_id}/history", params=user)).text
    return answers


async def _mcp_tools(stack: ForgetStack, episode_ids: list[str], fact_ids: list[str]) -> dict[str, str]:
    """What every read tool answers about carol, by tool and argument."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_list", {"user_id": "carol"}),
        ("memory_recall", {"user_id": "carol"}),
        ("memory_procedures", {"user_id": "carol", "query": VALUE}),
    ]
    for query in (VALUE, f"{VALUE} allergy", VARIANT):
        calls += [
            ("memory_search", {"user_id": "carol", "query": query}),
            ("knowledge_graph_search", {"user_id": "carol", "query": query}),
        ]
    calls += [("memory_expand", {"user_id": "carol", "id": memory_id}) for memory_id in [*episode_ids, *fact_ids]]
    calls += [("memory_get_fact", {"user_id": "carol", "fact_id": fact_id}) for fact_id in fact_ids]
    calls += [("memory_fact_history", {"user_id": "carol", "fact_id": fact_id}) for fact_id in fact_ids]
    answers: dict[str, str] = {}
    async with _mcp(stack) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} >= {name for name, _ in calls}
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            text = " ".join(part.text for part in result.content if isinstance(part, TextContent))
            answers[f"{name} {arguments}"] = text + json.dumps(result.structured_content, ensure_ascii=False)
    return answers


async def _ui_pages(stack: ForgetStack, episode_ids: list[str], fact_ids: list[str]) -> dict[str, str]:
    """The memory browser's pages and forms for carol, logged in with the tenant's key."""
    answers: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60, follow_redirects=True) as ui:
        assert (await ui.post("/ui/login", data={"api_key": ACME_KEY})).status_code == 200
        page = await ui.get("/ui/u/carol")
        answers["user page"] = page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        answers["users"] = (await ui.get("/ui")).text
        for episode_id in episode_ids:
            answers[f"episode {episode_id}"] = (await ui.get(f"/ui/u/carol/episodes/{episode_id}")).text
        for fact_id in fact_ids:
            answers[f"fact {fact_id}"] = (await ui.get(f"/ui/u/carol/facts/{fact_id}")).text
        for query in (VALUE, VARIANT):
            form = {"query": query, "csrf": csrf.group(1)}
            answers[f"search {query}"] = (await ui.post("/ui/u/carol/search", data=form)).text
            graph = {"entity": query, "hops": "2", "csrf": csrf.group(1)}
            answers[f"graph {query}"] = (await ui.post("/ui/u/carol/graph", data=graph)).text
            l0 = {"message": f"Can I eat {query}?", "csrf": csrf.group(1)}
            answers[f"l0 {query}"] = (await ui.post("/ui/u/carol/l0", data=l0)).text
    # The forms show what was typed into them: that is the question, not a memory.
    return {where: _without_form_echo(text) for where, text in answers.items()}


def _without_form_echo(page: str) -> str:
    page = re.sub(r'value="[^"]*"', "", page)
    return re.sub(r"(<textarea[^>]*>)[^<]*(</textarea>)", r"\1\2", page)


async def _streams(stack: ForgetStack) -> str:
    js = (await stack.resources.nats()).jetstream()
    subjects = stack.subjects
    texts = []
    for stream in (subjects.session_stream, subjects.derived_stream, subjects.dead_letter_stream):
        texts += [(message.data or b"").decode("utf-8", "replace") for message in await stream_messages(js, stream)]
    return "\n".join(texts)


async def _dump(stack: ForgetStack) -> str:
    """`tiermem dump`'s content, read from the running stack's own stores."""
    return to_json(await snapshot(await stack.resources.vector_index(), (await stack.resources.graph()).executor))


async def _merged_entity(stack: ForgetStack) -> Any:
    graph = await stack.resources.graph()

    async def merged() -> Any:
        for entity in await graph.search_entities(CAROL, VALUE):
            names = {entity.name, *entity.aliases}
            if VALUE in names and VARIANT in names:
                return entity
        return None

    return await wait_for(merged, timeout_s=120, what=f"dedup to merge {VARIANT} into {VALUE}")


async def test_forgetting_a_fact_leaves_its_value_nowhere_and_keeps_what_only_shares_a_word(
    forget_stack: ForgetStack,
) -> None:
    stack = forget_stack
    posted = [
        await stack.post("s-stated", STATED, hours_ago=5),
        await stack.post("s-variant", SPELLED_DIFFERENTLY, hours_ago=3),
        await stack.post("s-pine", SHARES_A_WORD, hours_ago=2),
        await stack.post("s-dave", STATED, hours_ago=1, owner=DAVE),  # another user said the same
    ]
    episode_ids = [(await stack.state(event_id, "consolidated"))["episode_id"] for event_id in posted[:3]]
    await stack.state(posted[3], "consolidated", user_id="dave")

    async def extracted() -> dict[str, dict[str, Any]] | None:
        by_value = {fact["value"]: fact for fact in await stack.facts()}
        wanted = {f"{VALUE} nuts", "pine nuts", "peanut butter", "vegetarian"}
        return by_value if wanted <= set(by_value) else None

    facts = await wait_for(extracted, timeout_s=120, what="carol's facts")
    await _merged_entity(stack)
    doomed = facts[f"{VALUE} nuts"]
    kept_ids = {facts[value]["id"] for value in ("pine nuts", "peanut butter", "vegetarian")}
    fact_ids = [doomed["id"], *kept_ids]
    before = await stack.audit(VALUE)
    # The value reached every kind of place before the erasure, or the checks below would prove nothing.
    assert {"sessions", "derived_events", "episodes", "passages", "facts", "keywords", "graph"} <= set(
        before.places()
    ), before.counts
    dave_before = await stack.audit(VALUE, owner=DAVE)
    assert dave_before.total > 0

    forget = await stack.http.delete(f"/v1/memories/{doomed['id']}", params={"user_id": "carol"})
    assert forget.status_code == 202, forget.text
    done = await stack.state(forget.json()["event_id"], "erasure_completed")
    assert done["removed"]["sessions_rebuilt"] == 2  # the stated session and the differently spelled one

    # The rebuilt episodes are back (the rest of what was said is still remembered)...
    async def rebuilt() -> list[dict[str, Any]] | None:
        response = await stack.http.get("/v1/memories", params={"user_id": "carol", "kind": "episode"})
        items: list[dict[str, Any]] = response.json()["items"]
        return items if len(items) == 3 else None

    episodes = await wait_for(rebuilt, timeout_s=120, what="carol's three episodes after the erasure")
    assert "Priya Raman" in json.dumps(episodes) and "peanut butter" in json.dumps(episodes).casefold()
    # ...and once the pipeline is idle again, the value is nowhere.
    await _idle(stack)
    for spelling in (VALUE, VARIANT, f"{VALUE} nuts"):
        after = await stack.audit(spelling)
        assert after.total == 0, (spelling, after.counts)
    answers = {
        **await _read_routes(stack, episode_ids, fact_ids),
        **await _mcp_tools(stack, episode_ids, fact_ids),
        **await _ui_pages(stack, episode_ids, fact_ids),
        "streams": await _streams(stack),
        "dump": await _dump(stack),
    }
    leaked = {where: _leaks(text) for where, text in answers.items() if _leaks(text) and "dave" not in where}
    assert not {where: found for where, found in leaked.items() if where != "streams" and where != "dump"}, sorted(
        leaked
    )
    assert "carol" in answers["dump"]
    carol_dump = json.loads(answers["dump"]).get("acme/carol")
    assert not _leaks(json.dumps(carol_dump, ensure_ascii=False)), "the dump still holds the value"
    streams_of_carol = [line for line in answers["streams"].splitlines() if '"carol"' in line]
    assert not _leaks("\n".join(streams_of_carol)), "carol's raw or derived messages still hold the value"

    # What only shares a word with the value is kept: other facts, and the words "nuts" and "allergy".
    remaining = {fact["id"]: fact for fact in await stack.facts()}
    assert kept_ids <= set(remaining), [fact["value"] for fact in remaining.values()]
    assert doomed["id"] not in remaining
    for shares_a_word in ("pine nuts", "allergy clinic", "peanut butter"):
        kept = await stack.audit(shares_a_word)
        assert {"sessions", "episodes", "passages"} <= set(kept.places()), (shares_a_word, kept.counts)
    # Another user who said the same thing is not touched by carol's erasure.
    assert (await stack.audit(VALUE, owner=DAVE)).counts == dave_before.counts

    # The CLI: found → exit 1 with the places; clean → exit 0 and a count of 0.
    data_dir = stack.settings.data_dir
    assert data_dir is not None
    (data_dir / "stack.json").write_text(json.dumps(_stack_file(stack.settings)), encoding="utf-8")
    runner, cli = CliRunner(), typer.Typer()
    cli.add_typer(audit_app, name="audit")
    args = ["audit", "value", "--tenant", "acme", "--user", "carol", "--data-dir", str(data_dir)]
    clean = await asyncio.to_thread(runner.invoke, cli, [*args, VALUE])
    assert clean.exit_code == 0, clean.output
    assert "found 0" in clean.output
    dirty = await asyncio.to_thread(runner.invoke, cli, [*args[:4], "--user", "dave", *args[6:], VALUE])
    assert dirty.exit_code == 1, dirty.output
    assert "sessions" in dirty.output
    # Without --user every user of the tenant is searched: dave's copy is found.
    tenant_wide = await asyncio.to_thread(runner.invoke, cli, [*args[:4], *args[6:], VALUE])
    assert tenant_wide.exit_code == 1, tenant_wide.output
    assert "acme/dave sessions" in tenant_wide.output and "acme/carol" not in tenant_wide.output


STATED_AGAIN = [
    f"I'm allergic to {VALUE} nuts. The team lunch on Friday needs a menu without them.",
    f"Understood: nothing with {VALUE} nuts at Friday's team lunch.",
]


async def test_a_value_stated_again_right_after_the_forget_is_kept_and_the_earlier_one_goes(
    forget_stack: ForgetStack,
) -> None:
    """The forget's cut is fixed at its 202: a session posted at once afterwards that states the value
    again (the user tells us again, on purpose) is kept with its episode and fact; the session from
    before it is redacted. The value audit then finds exactly the new session's places."""
    stack = forget_stack
    first = await stack.post("s-stated", STATED, hours_ago=5)
    first_episode = (await stack.state(first, "consolidated"))["episode_id"]

    async def extracted() -> dict[str, Any] | None:
        return next((fact for fact in await stack.facts() if fact["value"] == f"{VALUE} nuts"), None)

    doomed = await wait_for(extracted, timeout_s=120, what="carol's fact")
    forget = await stack.http.delete(f"/v1/memories/{doomed['id']}", params={"user_id": "carol"})
    assert forget.status_code == 202, forget.text
    again = await stack.post("s-again", STATED_AGAIN, hours_ago=0)  # at once: no sleep
    await stack.state(forget.json()["event_id"], "erasure_completed")
    again_episode = (await stack.state(again, "consolidated"))["episode_id"]

    async def restated() -> dict[str, Any] | None:
        fact = await extracted()
        return fact if fact is not None and (await _fact_sessions(stack, fact["id"])) == {"s-again"} else None

    fact = await wait_for(restated, timeout_s=120, what="the restated fact, observed in s-again only")
    await _idle(stack)

    # The new session, its episode and its fact are kept and readable.
    assert (await stack.state(again, "consolidated"))["episode_id"] == again_episode
    for memory_id in (again_episode, fact["id"]):
        response = await stack.http.get(f"/v1/memories/{memory_id}", params={"user_id": "carol"})
        assert response.status_code == 200 and VALUE in response.text, response.text
    assert await _fact_sessions(stack, fact["id"]) == {"s-again"}
    # The earlier session's episode is rebuilt without the value.
    earlier = await stack.http.get(f"/v1/memories/{first_episode}", params={"user_id": "carol"})
    assert earlier.status_code == 200 and "peanut butter" in earlier.text.casefold(), earlier.text
    assert not _leaks(earlier.text)
    # The audit finds the value in the new session's places only.
    audit = await stack.audit(VALUE)
    assert {"sessions", "episodes", "passages", "facts", "keywords"} <= set(audit.places()), audit.counts
    assert audit.counts["sessions"] == 1 and audit.counts["dead_letters"] == 0, audit.counts
    assert audit.found["acme/carol episodes"] == [again_episode]
    assert audit.found["acme/carol facts"] == [fact["id"]]
    for place, hits in audit.found.items():
        sessions = {await _session_of(stack, place.split(" ", 1)[1], hit) for hit in hits}
        assert sessions == {"s-again"}, (place, hits, sessions)


async def _fact_sessions(stack: ForgetStack, fact_id: str) -> set[str | None]:
    found = await (await stack.resources.facts()).get(CAROL, [fact_id])
    return {observation.session_id for stored in found for observation in stored.fact.provenance}


async def _session_of(stack: ForgetStack, place: str, hit: str) -> str | None:
    """The session a value audit hit came from."""
    js = (await stack.resources.nats()).jetstream()
    streams = {"sessions": stack.subjects.session_stream, "derived_events": stack.subjects.derived_stream}
    if place in streams:
        data = json.loads((await js.get_msg(streams[place], seq=int(hit))).data or b"{}")
        episode_id = data.get("episode_id") or data.get("source_episode_id")
        return str(data["session_id"]) if "session_id" in data else await _episode_session(stack, episode_id)
    if place == "graph":
        (entity,) = [e for e in await (await stack.resources.graph()).search_entities(CAROL, VALUE) if e.key == hit]
        sessions = {await _episode_session(stack, episode_id) for episode_id in entity.episode_ids}
        return sessions.pop() if len(sessions) == 1 else f"several: {sessions}"
    collection, _, point_id = hit.rpartition(":")
    collection = collection or place
    (record,) = await (await stack.resources.vector_index()).get(collection, CAROL, [point_id])
    if collection == "facts":
        sessions = {str(observation["session_id"]) for observation in record.payload["provenance"]}
        return sessions.pop() if len(sessions) == 1 else f"several: {sessions}"
    return str(record.payload["session_id"])


async def _episode_session(stack: ForgetStack, episode_id: str | None) -> str | None:
    found = await (await stack.resources.episodes()).get(CAROL, [episode_id]) if episode_id else []
    return found[0].session_id if found else None


async def _idle(stack: ForgetStack) -> None:
    """Every consumer has acknowledged everything delivered to it (the rebuilt sessions' extraction and
    dedup included)."""
    js = (await stack.resources.nats()).jetstream()

    async def idle() -> bool:
        for stream in (stack.subjects.session_stream, stack.subjects.derived_stream):
            for consumer in await js.consumers_info(stream):
                if consumer.num_pending or consumer.num_ack_pending:
                    return False
        return True

    await wait_for(idle, timeout_s=120, what="the pipeline to be idle")
    await asyncio.sleep(1.0)
    await wait_for(idle, timeout_s=120, what="the pipeline to be idle")


def _stack_file(settings: RecallApiSettings) -> dict[str, Any]:
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
