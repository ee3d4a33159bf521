"""Working memory and the context builder with the real o200k_base tokenizer (the recall API's, read
from the file litellm's wheel carries: nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiermem_client import ChatTurn, ContextBuilder, O200kCounter, SlotShares, TokenizerUnavailable, WorkingMemory
from tiermem_client.events import Message

from contracts import SessionCompleted as ServerSessionCompleted
from services.common.domain.tokens import TokenCounter, bundled_encoding_path

COUNTER = O200kCounter.load(bundled_encoding_path("o200k_base"))
SERVER = TokenCounter()
WORDS = ["the", "report", "Busan", ".", "?", "\n", "보고서는", "표부터", "보여줘", "한국어로", "<|endoftext|>", "42"]
TEXT = st.lists(st.sampled_from(WORDS), max_size=80).map(" ".join)
ROLES = st.sampled_from(["user", "assistant"])
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(text=TEXT)
def test_the_client_counts_tokens_exactly_as_the_recall_api(text: str) -> None:
    assert COUNTER.count_tokens(text) == SERVER.count_tokens(text)


def test_a_missing_tokenizer_file_is_a_clear_error(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("TIERMEM_O200K_FILE", "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(TokenizerUnavailable, match="TIERMEM_O200K_FILE"):
        O200kCounter.load()
    monkeypatch.setenv("TIERMEM_O200K_FILE", str(bundled_encoding_path("cl100k_base")))
    with pytest.raises(TokenizerUnavailable, match="sha256"):
        O200kCounter.load()


@FAST
@given(turns=st.lists(st.tuples(ROLES, TEXT), min_size=1, max_size=40), window=st.integers(40, 600))
def test_compression_happens_exactly_past_the_trigger_and_keeps_the_last_four_raw(
    turns: list[tuple[str, str]], window: int
) -> None:
    memory = WorkingMemory(COUNTER, window)
    for number, (role, content) in enumerate(turns, start=1):
        before_add = len(memory.compressions)
        recent_before, summary_before = list(memory.recent), memory.summary
        memory.add(role, content)  # type: ignore[arg-type]
        prompt_if_uncompressed = _tokens(summary_before, [*recent_before, memory.transcript[-1]])
        compressed = len(memory.compressions) > before_add
        should = prompt_if_uncompressed > 0.8 * window and len(recent_before) + 1 > 4
        assert compressed == should, (prompt_if_uncompressed, window, len(recent_before))
        assert [t.content for t in memory.recent[-4:]] == [c for _, c in turns[max(0, number - 4) : number]]
        assert len(memory.recent) >= min(4, number)
    assert [m.content for m in memory.transcript] == [c for _, c in turns]


def _tokens(summary: str | None, turns: Sequence[Message]) -> int:
    from tiermem_client.working_memory import SUMMARY_PREFIX

    total = COUNTER.count_tokens(SUMMARY_PREFIX + summary) if summary else 0
    return total + sum(COUNTER.count_tokens(turn.content) for turn in turns)


@FAST
@given(
    window=st.integers(10, 3000),
    system_prompt=TEXT,
    rules=st.lists(TEXT, max_size=30),
    section=TEXT,
    instructions=TEXT,
    history=st.lists(st.tuples(ROLES, TEXT), max_size=30),
    shares=st.tuples(st.floats(0.10, 0.20), st.floats(0.20, 0.30), st.floats(0.30, 0.40)),
)
def test_no_slot_ever_exceeds_its_budget_and_everything_left_out_is_reported(
    window: int,
    system_prompt: str,
    rules: list[str],
    section: str,
    instructions: str,
    history: list[tuple[str, str]],
    shares: tuple[float, float, float],
) -> None:
    builder = ContextBuilder(COUNTER, window, SlotShares(*shares))
    turns = [ChatTurn(role=role, content=content) for role, content in history]  # type: ignore[arg-type]
    built = builder.build(
        system_prompt=system_prompt,
        rules=rules,
        memory_section=section,
        memory_instructions=instructions,
        history=turns,
    )
    for slot, used in built.tokens.items():
        assert used <= built.budgets[slot], slot
    assert sum(built.budgets.values()) <= 0.9 * window
    dropped_rules = {d.index for d in built.dropped if d.what == "rule"}
    system = built.messages[0].content if built.messages and built.messages[0].role == "system" else ""
    assert all(f"- {rule}" in system for i, rule in enumerate(rules) if i not in dropped_rules)
    dropped_turns = [d.index for d in built.dropped if d.what == "turn"]
    assert dropped_turns == list(range(len(dropped_turns)))  # always the oldest ones
    kept_history = built.messages[1:] if system else built.messages
    assert kept_history == turns[len(dropped_turns) :]  # the newest turns, verbatim and in order


def test_the_memory_section_is_kept_whole_or_dropped_and_reported() -> None:
    section = "## Memory Context\n```memory\n- The user lives in Busan.\n```"
    builder = ContextBuilder(COUNTER, 1000)
    built = builder.build(system_prompt="You help.", memory_section=section, memory_instructions="Use memory.")
    assert section in built.messages[0].content and not built.dropped
    tiny = ContextBuilder(COUNTER, 40)
    built = tiny.build(system_prompt="You help.", memory_section=section)
    assert "Busan" not in built.messages[0].content
    assert [d.what for d in built.dropped] == ["memory section"]
    assert tiny.memory_budget() == tiny.budget("memory")
    assert 0 < builder.memory_budget("Use memory.") < builder.budget("memory") - COUNTER.count_tokens("Use memory.")
    assert ContextBuilder(COUNTER, 200_000).memory_budget() == 8000  # the recall API's cap


def test_a_long_conversation_compresses_with_an_injected_summariser_and_ends_as_the_full_session() -> None:
    calls: list[int] = []

    def summarise(previous: str | None, turns: Sequence[Message]) -> str:
        calls.append(len(turns))
        return (previous or "") + f" [{len(turns)} turns about the trip]"

    memory = WorkingMemory(COUNTER, 200, summariser=summarise)
    for number in range(30):
        memory.add("user" if number % 2 == 0 else "assistant", f"Turn {number}: we talk about the Busan trip plan.")
    assert calls and sum(calls) == 30 - len(memory.recent)
    assert memory.tokens() <= 200 and len(memory.recent) >= 4
    assert memory.prompt_turns()[0].role == "system" and "turns about the trip" in memory.prompt_turns()[0].content
    event = memory.session_completed(tenant_id="acme", user_id="alice", agent_id="bot", session_id="s-1")
    assert [m.content for m in event.messages] == [f"Turn {n}: we talk about the Busan trip plan." for n in range(30)]
    again = memory.session_completed(tenant_id="acme", user_id="alice", agent_id="bot", session_id="s-1")
    assert again.event_id == event.event_id  # sending the session twice is one session
    ServerSessionCompleted.model_validate_json(event.model_dump_json())  # the server accepts it as is
