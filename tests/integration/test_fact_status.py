"""A status filter over the real pipeline (nats-server, FalkorDB, Qdrant Edge, the summarizer,
extractor and pruner in-process behind the HTTP API and the CLI): status belongs to facts alone, so it
lists facts only, and asking episodes for one is refused with the field and the reason."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.test_write_api import NOW, WriteStack, _cli
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack
from tests.support.events import session_event

pytestmark = pytest.mark.integration


async def _save_and_correct(write_stack: WriteStack) -> tuple[str, str]:
    """A saved fact (Seoul) corrected through the API (Busan): (old id, new id)."""
    http = write_stack.http
    saved = await http.post(
        "/v1/facts",
        json={"user_id": "alice", "text": "The user lives in Seoul.", "attribute": "lives_in", "value": "Seoul"},
    )
    assert saved.status_code == 200, saved.text
    old_id: str = saved.json()["fact_id"]
    corrected = await http.post(
        f"/v1/facts/{old_id}/corrections",
        json={"user_id": "alice", "value": "Busan", "text": "The user lives in Busan."},
    )
    assert corrected.status_code == 200, corrected.text
    new_id: str = corrected.json()["fact_id"]
    return old_id, new_id


async def test_a_status_filter_lists_facts_only_and_refuses_episodes(write_stack: WriteStack) -> None:
    event = session_event(
        session_id="s-status", texts=["I started learning the cello this spring.", "Lovely!"], ended_at=NOW
    )
    await write_stack.post_session(event)
    episode_id = (await write_stack.wait_state(str(event.event_id), "consolidated"))["episode_id"]
    old_id, _new_id = await _save_and_correct(write_stack)
    note = {"user_id": "alice", "text": "The user prefers window seats."}
    for key in ("seat-1", "seat-2"):  # two observations: confirmed
        await write_stack.http.post("/v1/facts", json=note, headers={"Idempotency-Key": key})
    await write_stack.http.post("/v1/facts", json={"user_id": "alice", "text": "The user plays chess on Sundays."})
    assert episode_id in [m["id"] for m in await write_stack.memories()]

    superseded = await write_stack.memories(status="superseded")
    assert [(m["id"], m["kind"], m["status"]) for m in superseded] == [(old_id, "fact", "superseded")]
    for fact_status in ("tentative", "confirmed"):
        listed = await write_stack.memories(status=fact_status)
        assert listed and {(m["kind"], m["status"]) for m in listed} == {("fact", fact_status)}, listed

    refused = await write_stack.http.get(
        "/v1/memories", params={"user_id": "alice", "kind": "episode", "status": "superseded"}
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["errors"][0]
    assert error["field"] == "status" and "facts only" in error["reason"]

    listed_cli = await asyncio.to_thread(_cli, write_stack, "memories", "list", "-u", "alice", "--status", "superseded")
    assert listed_cli.exit_code == 0, listed_cli.output
    assert old_id in listed_cli.stdout and episode_id not in listed_cli.stdout and '"episode"' not in listed_cli.stdout
