"""Forgetting a fact also forgets its value in per-turn sessions that are still open (issues 48/51),
on the path users run: sessions posted and turns appended over HTTP, the real pipeline in-process on
real nats-server, FalkorDB and Qdrant Edge, `DELETE /v1/memories/{fact_id}`, then `.../end`.

The value audit (`tiermem audit value`) finds the value in the open session's bucket; the forget
redacts the turns appended before its 202 (both roles; what else a turn said is kept), so the session
completes without them and no read route returns the value; a turn appended after the 202 that states
the value again is kept, also when the session is ended right after the 202, before the erasure
reached it (then its earlier turns are redacted in the session stream). `tiermem audit user` lists
the user's open sessions."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from services.cli.audit import audit_app
from services.common.stores.open_sessions import OpenSessionStore
from tests.integration.test_forget_value import VALUE, ForgetStack, _idle, _leaks, _stack_file
from tests.integration.test_forget_value import embedder as embedder
from tests.integration.test_forget_value import forget_stack as forget_stack
from tests.integration.test_forget_value import keywords as keywords
from tests.support.events import stream_messages, wait_for

pytestmark = pytest.mark.integration

STATED = [
    f"I'm allergic to {VALUE} nuts. I'm vegetarian.",
    f"Noted: vegetarian, {VALUE} allergy.",
]
# Session A: open when the fact is forgotten, ended after it.
OPEN_BEFORE = [
    ("user", f"For the picnic: I'm allergic to {VALUE} nuts. Bring the peanut butter sandwiches."),
    ("assistant", f"Noted, no {VALUE} at the picnic. Peanut butter sandwiches it is."),
    ("user", "The picnic is at Lake Orta on Sunday."),
]
# Session B: open when the fact is forgotten; one turn before the 202, one after it.
B_BEFORE = ("user", f"My {VALUE} allergy means no trail mix on the hike.")
B_AFTER = ("user", f"To be clear, I'm allergic to {VALUE} nuts: please remember that.")


def _turns(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": role, "content": content} for role, content in turns]}


async def _append(stack: ForgetStack, session: str, *turns: tuple[str, str]) -> None:
    response = await stack.http.post(f"/v1/users/carol/sessions/{session}/messages", json=_turns(*turns))
    assert response.status_code == 202, response.text


async def _open_turns(stack: ForgetStack, session: str) -> list[str]:
    response = await stack.http.get(f"/v1/users/carol/sessions/{session}")
    assert response.status_code == 200, response.text
    return [turn["content"] for turn in response.json()["turns"]]


async def _forgotten_fact(stack: ForgetStack) -> dict[str, Any]:
    event_id = await stack.post("s-stated", STATED, hours_ago=5)
    await stack.state(event_id, "consolidated")

    async def extracted() -> dict[str, Any] | None:
        return next((fact for fact in await stack.facts() if fact["value"] == f"{VALUE} nuts"), None)

    fact: dict[str, Any] = await wait_for(extracted, timeout_s=120, what="carol's fact")
    return fact


async def test_forget_redacts_open_sessions_and_keeps_turns_appended_after_its_202(
    forget_stack: ForgetStack,
) -> None:
    stack = forget_stack
    doomed = await _forgotten_fact(stack)
    await _append(stack, "chat-a", *OPEN_BEFORE)
    await _append(stack, "chat-b", B_BEFORE)
    before = await stack.audit(VALUE)
    # Both roles' turns of both open sessions are found in the bucket, or the checks below prove nothing.
    assert sorted(before.found["acme/carol open_sessions"]) == ["chat-a#0", "chat-a#1", "chat-b#0"], before.found

    forget = await stack.http.delete(f"/v1/memories/{doomed['id']}", params={"user_id": "carol"})
    assert forget.status_code == 202, forget.text
    await _append(stack, "chat-b", B_AFTER)  # at once: the user tells us again, after the 202
    done = await stack.state(forget.json()["event_id"], "erasure_completed")
    assert done["state"] == "erasure_completed", done

    # Session A keeps what did not state the value; session B keeps only the turn appended after the 202.
    kept_a = await _open_turns(stack, "chat-a")
    assert kept_a == ["Bring the peanut butter sandwiches.", "Peanut butter sandwiches it is.", OPEN_BEFORE[2][1]]
    assert await _open_turns(stack, "chat-b") == [B_AFTER[1]]

    # A completes without the value: its episode and every read route are clean of it.
    ended = await stack.http.post("/v1/users/carol/sessions/chat-a/end")
    assert ended.status_code == 202, ended.text
    episode_id = (await stack.state(ended.json()["event_id"], "consolidated"))["episode_id"]
    episode = await stack.http.get(f"/v1/memories/{episode_id}", params={"user_id": "carol"})
    assert episode.status_code == 200 and "lake orta" in episode.text.casefold(), episode.text
    assert not _leaks(episode.text)
    for query in (VALUE, f"{VALUE} allergy picnic"):
        search = await stack.http.post("/v1/memories/search", json={"user_id": "carol", "query": query})
        assert search.status_code == 200 and not _leaks(search.text), search.text
        auto = await stack.http.post("/v1/recall/auto", json={"user_id": "carol", "message": f"Can I eat {query}?"})
        assert auto.status_code == 200 and not _leaks(auto.text), auto.text

    # The audit finds the value only in the turn said again after the 202, still open.
    after = await stack.audit(VALUE)
    assert after.found == {"acme/carol open_sessions": ["chat-b#0"]}, after.found


async def test_a_session_ended_right_after_the_forget_keeps_only_its_later_turns(forget_stack: ForgetStack) -> None:
    """Ended at once after the 202, the session completes into the stream above the forget's cut, with
    turns appended before the 202 in it: those are redacted there, the later one is kept."""
    stack = forget_stack
    doomed = await _forgotten_fact(stack)
    await _append(stack, "chat-c", *OPEN_BEFORE)
    forget = await stack.http.delete(f"/v1/memories/{doomed['id']}", params={"user_id": "carol"})
    assert forget.status_code == 202, forget.text
    await _append(stack, "chat-c", B_AFTER)  # at once, and ended at once: no sleep
    ended = await stack.http.post("/v1/users/carol/sessions/chat-c/end")
    assert ended.status_code == 202, ended.text
    await stack.state(forget.json()["event_id"], "erasure_completed")
    await _idle(stack)

    js = (await stack.resources.nats()).jetstream()
    subject = stack.subjects.session_completed("acme", "carol")
    copies = [json.loads(message.data) for message in await stream_messages(js, stack.subjects.session_stream, subject)]
    (session,) = [copy for copy in copies if copy["session_id"] == "chat-c"]
    assert session["event_id"] != ended.json()["event_id"]  # the original is replaced by a redacted copy
    assert [message["content"] for message in session["messages"]] == [
        "Bring the peanut butter sandwiches.",
        "Peanut butter sandwiches it is.",
        OPEN_BEFORE[2][1],
        B_AFTER[1],
    ]
    # What the user said again is kept: the audit finds the value in that session and what it became.
    after = await stack.audit(VALUE)
    assert after.counts["sessions"] == 1 and after.counts["open_sessions"] == 0, after.counts


async def test_audit_user_lists_open_sessions(forget_stack: ForgetStack) -> None:
    stack = forget_stack
    await _append(stack, "chat-open", ("user", "Remind me to water the ferns on Friday."))
    data_dir = stack.settings.data_dir
    assert data_dir is not None
    (data_dir / "stack.json").write_text(json.dumps(_stack_file(stack.settings)), encoding="utf-8")
    runner, cli = CliRunner(), typer.Typer()
    cli.add_typer(audit_app, name="audit")
    args = ["audit", "user", "acme", "carol", "--data-dir", str(data_dir)]
    listed = await asyncio.to_thread(runner.invoke, cli, args)
    assert listed.exit_code == 1, listed.output  # the open session is a trace of carol
    assert re.search(r"open_sessions\s*│\s*1\s*│", listed.output), listed.output

    # Once her erasure removed it, the audit no longer lists it.
    erased = await stack.http.delete("/v1/users/carol")
    assert erased.status_code == 202, erased.text
    await stack.state(erased.json()["event_id"], "erasure_completed")
    store = OpenSessionStore((await stack.resources.nats()).jetstream(), stack.subjects)
    assert await store.keys() == []
    clean = await asyncio.to_thread(runner.invoke, cli, args)
    assert clean.exit_code == 0, clean.output
