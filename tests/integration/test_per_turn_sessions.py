"""Per-turn sessions (issue 51) against a real `tiermem up` process tree (nats-server, FalkorDB, every
service, the recall API on a loopback port), with a short idle timeout: turns appended as they happen,
ended into one SessionCompleted and found by search; a retried turn or /end is a duplicate; an idle
session closes by itself; the user's erasure removes the buffered turns (and keeps those appended after
its 202); another tenant or user can neither read, append to nor end it; bad input is a 4xx naming
the field; the light client does the same."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tiermem_client import TiermemClient

from services.cli.servers.net import free_port
from tests.integration.test_minimal_add import found, settled
from tests.integration.test_stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

IDLE_S = 6.0
KEYS = {"acme": secrets.token_urlsafe(32), "globex": secrets.token_urlsafe(32)}


@pytest.fixture(scope="module")
def tiermem_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("per-turn") / "data", free_port())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIERMEM_API_KEYS", "{" + ", ".join(f'"{key}": "{t}"' for t, key in KEYS.items()) + "}")
        env.setenv("TIERMEM_OPEN_SESSION_IDLE_S", str(IDLE_S))
        env.setenv("TIERMEM_OPEN_SESSION_SWEEP_S", "0.5")
        try:
            running.start()
            yield running
        finally:
            running.kill()


def _client(stack: Stack, tenant: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
    return httpx.Client(base_url=f"http://127.0.0.1:{stack.http_port}", headers=headers, timeout=60)


@pytest.fixture(scope="module")
def http(tiermem_up: Stack) -> Iterator[httpx.Client]:
    with _client(tiermem_up, "acme") as client:
        yield client


@pytest.fixture(scope="module")
def other_tenant(tiermem_up: Stack) -> Iterator[httpx.Client]:
    with _client(tiermem_up, "globex") as client:
        yield client


def path(user: str, session: str, tail: str = "") -> str:
    return f"/v1/users/{user}/sessions/{session}{tail}"


def turn(role: str, content: str, turn_id: str | None = None) -> dict[str, str]:
    return {"role": role, "content": content, **({"turn_id": turn_id} if turn_id else {})}


def append(http: httpx.Client, user: str, session: str, *turns: dict[str, str], **extra: Any) -> httpx.Response:
    return http.post(path(user, session, "/messages"), json={"messages": list(turns), **extra})


def test_turns_appended_then_ended_are_found_and_retries_are_duplicates(http: httpx.Client) -> None:
    first = append(
        http,
        "sora",
        "chat-1",
        turn("user", "I just started learning the cello with a teacher called Ines.", "t1"),
        turn("assistant", "How exciting! How long have you been playing?", "t2"),
        metadata={"app": "tutor"},
    )
    assert first.status_code == 202, first.text
    assert first.json() == {
        "user_id": "sora", "session_id": "chat-1", "state": "open", "turns": 2, "appended": 2, "duplicates": 0
    }  # fmt: skip
    # A retry of the last request plus a new turn: t2 is a duplicate, t3 is new.
    retried = append(
        http,
        "sora",
        "chat-1",
        turn("assistant", "How exciting! How long have you been playing?", "t2"),
        turn("user", "Three weeks; Ines says my bowing is getting better.", "t3"),
    )
    assert retried.status_code == 202 and (retried.json()["appended"], retried.json()["duplicates"]) == (1, 1)
    assert retried.json()["turns"] == 3

    read = http.get(path("sora", "chat-1"))
    assert read.status_code == 200, read.text
    view = read.json()
    assert view["state"] == "open" and view["metadata"] == {"app": "tutor"} and view["event_id"] is None
    assert [t["turn_id"] for t in view["turns"]] == ["t1", "t2", "t3"]

    ended = http.post(path("sora", "chat-1", "/end"))
    assert ended.status_code == 202, ended.text
    body = ended.json()
    assert body["duplicate"] is False and body["turns"] == 3
    assert body["status_url"] == f"/v1/events/{body['event_id']}?user_id=sora"
    again = http.post(path("sora", "chat-1", "/end"))
    assert again.status_code == 202 and again.json() == {**body, "duplicate": True}

    closed = http.get(path("sora", "chat-1")).json()
    assert (closed["state"], closed["event_id"], closed["turns"], closed["closed_by"]) == (
        "closed", body["event_id"], [], "end"
    )  # fmt: skip
    late = append(http, "sora", "chat-1", turn("user", "One more thing."))
    assert late.status_code == 409 and late.json()["errors"][0]["field"] == "session_id", late.text

    status = settled(http, body["status_url"])
    assert status["state"] == "consolidated", status
    assert found(http, "sora", "cello teacher Ines bowing") == [status["episode_id"]]


def test_bad_turns_are_refused_with_the_field_and_nothing_is_buffered(http: httpx.Client) -> None:
    empty = append(http, "sora", "bad-1", turn("user", "   "))
    assert empty.status_code == 422 and empty.json()["errors"][0]["field"] == "messages.0.content", empty.text
    none = http.post(path("sora", "bad-1", "/messages"), json={"messages": []})
    assert none.status_code == 422 and none.json()["errors"][0]["field"] == "messages", none.text
    assert http.get(path("sora", "bad-1")).status_code == 404  # nothing was opened by a refused append

    too_many = append(http, "sora", "bad-1", *[turn("user", f"turn {i}") for i in range(2001)])
    assert too_many.status_code == 413 and too_many.json()["errors"][0]["field"] == "messages", too_many.text
    too_long = append(http, "sora", "bad-1", turn("user", "x" * 32_001))
    assert too_long.status_code == 413, too_long.text
    assert http.get(path("sora", "bad-1")).status_code == 404

    assert append(http, "sora", "bad-2", turn("user", "Hello there.", "a")).status_code == 202
    changed = append(http, "sora", "bad-2", turn("user", "Something else.", "a"))
    assert changed.status_code == 409 and changed.json()["errors"][0]["field"] == "turn_id", changed.text
    channel = append(http, "sora", "bad-2", turn("user", "Hi all."), channel="group")
    assert channel.status_code == 409 and channel.json()["errors"][0]["field"] == "channel", channel.text
    assert [t["content"] for t in http.get(path("sora", "bad-2")).json()["turns"]] == ["Hello there."]
    assert http.post(path("sora", "no-such", "/end")).status_code == 404
    bad_id = http.get(path("sora", "no such"))
    assert bad_id.status_code == 422, bad_id.text


def test_another_tenant_or_user_can_neither_read_append_nor_end(http: httpx.Client, other_tenant: httpx.Client) -> None:
    assert (
        append(http, "mina", "private-1", turn("user", "My PIN hint is the name of my first dog.")).status_code == 202
    )
    for stranger, user in ((other_tenant, "mina"), (http, "mino")):
        assert stranger.get(path(user, "private-1")).status_code == 404
        assert stranger.post(path(user, "private-1", "/end")).status_code == 404
        # Their append opens a session of their own; mina's is untouched.
        assert append(stranger, user, "private-1", turn("user", "Hi.")).json()["turns"] == 1
    view = http.get(path("mina", "private-1")).json()
    assert view["state"] == "open" and [t["content"] for t in view["turns"]] == [
        "My PIN hint is the name of my first dog."
    ]


def test_an_idle_session_is_completed_by_the_timeout(http: httpx.Client) -> None:
    accepted = append(http, "jun", "idle-1", turn("user", "I am repainting my kayak bright orange this weekend."))
    assert accepted.status_code == 202, accepted.text
    deadline = time.monotonic() + IDLE_S + 60
    while (view := http.get(path("jun", "idle-1")).json())["state"] != "closed":
        assert time.monotonic() < deadline, f"the idle session was not closed: {view}"
        time.sleep(0.5)
    assert view["closed_by"] == "idle" and view["turn_count"] == 1
    ended = http.post(path("jun", "idle-1", "/end"))  # /end after the timeout: the same event
    assert ended.status_code == 202 and ended.json()["duplicate"] is True
    assert ended.json()["event_id"] == view["event_id"]
    status = settled(http, view["status_url"])
    assert status["state"] == "consolidated", status
    assert found(http, "jun", "kayak orange repainting") == [status["episode_id"]]


def test_erasing_the_user_removes_open_turns_and_closed_memories_and_keeps_later_turns(http: httpx.Client) -> None:
    done = append(http, "tae", "old-1", turn("user", "I keep bees on the roof of my flat in Daegu."))
    assert done.status_code == 202
    ended = http.post(path("tae", "old-1", "/end")).json()
    assert settled(http, ended["status_url"])["state"] == "consolidated"
    assert append(http, "tae", "open-1", turn("user", "My bees produced ten jars of honey.")).status_code == 202

    erased = http.delete("/v1/users/tae")
    assert erased.status_code == 202, erased.text
    assert http.get(path("tae", "open-1")).status_code == 404  # the buffered turns went with the 202
    assert http.get(path("tae", "old-1")).status_code == 404
    after = append(http, "tae", "open-1", turn("user", "Now I am starting a vegetable patch."))
    assert after.status_code == 202 and after.json()["turns"] == 1, after.text

    status = settled_erasure(http, erased.json()["status_url"])
    assert status["state"] == "erasure_completed", status
    assert found(http, "tae", "bees roof Daegu honey") == []
    kept = http.get(path("tae", "open-1")).json()
    assert [t["content"] for t in kept["turns"]] == ["Now I am starting a vegetable patch."]


def settled_erasure(http: httpx.Client, status_url: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = http.get(status_url).json()
        if body["state"] == "erasure_completed" or time.monotonic() > deadline:
            return body
        time.sleep(0.3)


def test_the_light_client_appends_ends_and_waits(tiermem_up: Stack) -> None:
    url = f"http://127.0.0.1:{tiermem_up.http_port}"
    with TiermemClient(url, KEYS["acme"]) as client:
        first = client.add_turns("ria", "c-1", [{"role": "user", "content": "I run a ceramics studio in Jeonju."}])
        assert first.turns == 1
        retry = client.add_turns(
            "ria",
            "c-1",
            [{"role": "assistant", "content": "What do you make there?", "turn_id": "a1"}],
        )
        again = client.add_turns(
            "ria",
            "c-1",
            [{"role": "assistant", "content": "What do you make there?", "turn_id": "a1"}],
        )
        assert (retry.appended, again.duplicates, again.turns) == (1, 1, 2)
        assert client.read_session("ria", "c-1").state == "open"
        ended = client.end_session("ria", "c-1")
        assert client.end_session("ria", "c-1").duplicate is True
        status = client.wait(ended.event_id, user_id="ria")
        assert status.state == "consolidated"
        hits = client.search("ceramics studio Jeonju", user_id="ria", kinds=["episode"])
        assert [item.id for item in hits.items] == [status.episode_id]
