"""An offline chat loop on `tiermem-client` alone, against a running `tiermem up`.

It shows the three things a chat system gets from tiermem: a fact said in one session recalled in the
next without being named, a working rule ("보고서는 표부터 보여줘") applied in a later session, and the
context window compressing on a long conversation while the last 4 turns stay verbatim. No LLM is
called: the assistant's replies are canned and compression uses the offline extractive summariser.

    tiermem up &                                   # writes .tiermem/dev-api-key, tenant "local"
    .venv/bin/python scripts/client_chat_loop.py   # the dev .venv has the client (scripts/bootstrap)

or, with the client alone: `pip install './client[tokens]'` and `python scripts/client_chat_loop.py`.
It reads TIERMEM_RECALL_URL and TIERMEM_API_KEY as the CLI does. Tokens are counted exactly when the
o200k_base file is on disk (TIERMEM_O200K_FILE), else approximately (see `load_counter`).

It prints what happens and, last, one JSON line with the outcome; the exit code is 0 when all three held.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from tiermem_client import (
    DEFAULT_URL,
    ContextBuilder,
    TiermemClient,
    TokenCounter,
    TurnRequest,
    WorkingMemory,
    extract_rules,
    load_counter,
    turn_context,
)

WINDOW = 4000


def wait_until(what: str, check: object, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.5)
    raise SystemExit(f"gave up waiting for {what} after {timeout_s:.0f}s")


def end_session(client: TiermemClient, memory: WorkingMemory, tenant: str, user: str, session_id: str) -> str:
    """Publish the full transcript and save the rules the user stated."""
    event = memory.session_completed(tenant_id=tenant, user_id=user, agent_id="demo-bot", session_id=session_id)
    client.add_session(event)
    for turn in memory.transcript:
        if turn.role == "user":
            for rule in extract_rules(turn.content):
                client.save_rule(user, rule.text, topic=rule.topic, request_id=f"{session_id}-{rule.topic}")
                print(f"  saved rule [{rule.topic}]: {rule.text}")
    return str(event.event_id)


def first_session(client: TiermemClient, counter: TokenCounter, tenant: str, user: str) -> None:
    print("session 1: the user mentions where they live and states a rule")
    memory = WorkingMemory(counter, WINDOW)
    memory.add("user", "I moved to Busan last month, the sea view is great.")
    memory.add("assistant", "Lovely! Enjoy Busan.")
    memory.add("user", "보고서는 표부터 보여줘.")
    memory.add("assistant", "알겠습니다. 보고서는 표부터 보여드릴게요.")
    event_id = end_session(client, memory, tenant, user, f"s1-{uuid.uuid4().hex[:6]}")
    client.wait(event_id, user_id=user, timeout=180)
    wait_until("the extracted fact", lambda: any("Busan" in i.abstract for i in client.facts(user).items))


def second_session(client: TiermemClient, counter: TokenCounter, user: str) -> dict[str, bool]:
    message = "Where do I live now? Also draft this week's 보고서."
    print(f"session 2: the user asks {message!r}")
    builder = ContextBuilder(counter, WINDOW)
    context = turn_context(client, builder, TurnRequest(user_id=user, message=message, system_prompt="You help."))
    system = context.messages[0].content
    print("  system message of the turn:\n" + "\n".join("    " + line for line in system.splitlines()))
    return {"fact_recalled": "Busan" in system, "rule_loaded": "보고서는 표부터 보여줘" in system}


def long_conversation(counter: TokenCounter) -> dict[str, int]:
    window = 300
    memory = WorkingMemory(counter, window)
    for number in range(40):
        memory.add(
            "user" if number % 2 == 0 else "assistant",
            f"Turn {number}: more on the Jeju trip, flights, hotels and weather.",
        )
    turns, compressions, tokens = len(memory.transcript), len(memory.compressions), memory.tokens()
    print(f"long conversation: {turns} turns, {compressions} compressions, {tokens} prompt tokens")
    print(f"  of a {window}-token window; the last {len(memory.recent)} turns kept verbatim")
    return {"compressions": len(memory.compressions), "prompt_tokens": memory.tokens(), "window": window}


def api_key(data_dir: Path) -> str:
    if os.environ.get("TIERMEM_API_KEY"):
        return os.environ["TIERMEM_API_KEY"]
    key_file = data_dir / "dev-api-key"
    if not key_file.is_file():
        raise SystemExit(f"no API key: set TIERMEM_API_KEY or start `tiermem up` (it writes {key_file})")
    return key_file.read_text(encoding="utf-8").strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=os.environ.get("TIERMEM_RECALL_URL", DEFAULT_URL), help="TIERMEM_RECALL_URL")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("TIERMEM_DATA_DIR", ".tiermem")))
    parser.add_argument("--tenant", default="local", help="the tenant of the key (`tiermem up`: local)")
    args = parser.parse_args(argv)
    counter = load_counter()
    user = f"demo-{uuid.uuid4().hex[:8]}"
    with TiermemClient(args.url, api_key(args.data_dir), timeout_s=60) as client:
        first_session(client, counter, args.tenant, user)
        outcome: dict[str, object] = {**second_session(client, counter, user), **long_conversation(counter)}
    ok = bool(outcome["fact_recalled"] and outcome["rule_loaded"] and outcome["compressions"])
    print(json.dumps({"ok": ok, **outcome}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
