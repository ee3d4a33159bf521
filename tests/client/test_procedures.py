"""Procedural memory end to end: rules stated in a session are saved through the write policy, loaded
into the next session's context without being named, superseded by a contradicting rule, narrowed to
the relevant ones under a budget, and never visible to another user, a group channel or another tenant.
Real recall API and pipeline (nats-server, FalkorDB, Qdrant Edge, summarizer, extractor)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tiermem_client import (
    SHARED_RULES_USER,
    AsyncTiermemClient,
    ContextBuilder,
    InvalidRequestError,
    O200kCounter,
    TurnRequest,
    WorkingMemory,
    aturn_context,
    extract_rules,
    select_rules,
)
from tiermem_client.events import Channel

from services.common.domain.tokens import bundled_encoding_path
from tests.integration.test_recall_api import API_KEYS
from tests.integration.test_write_api import ACME_KEY, NOW, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack
from tests.support.events import wait_for

pytestmark = pytest.mark.integration

COUNTER = O200kCounter.load(bundled_encoding_path("o200k_base"))
GLOBEX_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "globex")


def test_rules_are_recognised_in_english_and_korean_and_one_off_requests_are_not() -> None:
    said = "I moved to Busan last month. 보고서는 표부터 보여줘. Always answer in Korean. 이거 좀 봐줘. Can you always?"
    assert [(r.topic, r.text) for r in extract_rules(said)] == [
        ("보고서", "보고서는 표부터 보여줘."),
        ("answer_language", "Always answer in Korean."),
    ]
    assert extract_rules("앞으로 한국어로 답해줘")[0].topic == "answer_language"
    assert extract_rules("Never use emojis in emails.")[0].topic == "emoji"
    assert extract_rules("나는 부산에 살아") == [] and extract_rules("What do you always do?") == []


async def finish_session(client: AsyncTiermemClient, memory: WorkingMemory, session_id: str) -> str:
    """What a chat system does when a conversation ends: the transcript in, the stated rules saved.

    The session ends now, as it would in a live chat: the rules it states then reach the server twice (the
    chat system's save and the extractor's reading of the transcript), both observed at the session's end,
    so a later session's rule is newer than everything an earlier one said, whichever write lands first."""
    event = memory.session_completed(tenant_id="acme", user_id="alice", agent_id="bot", session_id=session_id)
    ended = datetime.now(UTC)
    event = event.model_copy(update={"started_at": ended - timedelta(minutes=30), "ended_at": ended})
    await client.add_session(event)
    for turn in memory.transcript:
        if turn.role == "user":
            for rule in extract_rules(turn.content):
                await client.save_rule("alice", rule.text, topic=rule.topic, request_id=f"{session_id}-{rule.topic}")
    return str(event.event_id)


async def build_turn(client: AsyncTiermemClient, builder: ContextBuilder, message: str) -> str:
    """The system message of the next turn, as a chat system assembles it."""
    request = TurnRequest(user_id="alice", message=message, system_prompt="You help.")
    context = await aturn_context(client, builder, request)
    assert all(used <= context.built.budgets[slot] for slot, used in context.built.tokens.items())
    assert context.recalled.section in context.messages[0].content  # whole, never cut inside its fence
    return context.messages[0].content


async def test_a_rule_and_a_fact_from_one_session_shape_the_next_and_a_new_rule_replaces_the_old(
    write_stack: WriteStack,
) -> None:
    builder = ContextBuilder(COUNTER, 4000)
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        first = WorkingMemory(COUNTER, 4000)
        first.add("user", "I moved to Busan last month, the sea view is great. 보고서는 표부터 보여줘.")
        first.add("assistant", "Enjoy Busan! Noted: reports start with a table.")
        event_id = await finish_session(client, first, "s-a")

        async def consolidated() -> bool:
            return (await client.event_status("alice", event_id)).state == "consolidated"

        await wait_for(consolidated, timeout_s=90, what="session A consolidated")

        async def fact_extracted() -> bool:
            return any("Busan" in item.abstract for item in (await client.facts("alice")).items)

        await wait_for(fact_extracted, timeout_s=90, what="the Busan fact")

        system = await build_turn(client, builder, "Where do I live now? And draft this week's 보고서, please.")
        assert "보고서는 표부터 보여줘" in system and "Busan" in system, system

        later = WorkingMemory(COUNTER, 4000)
        later.add("user", "보고서는 요약부터 보여줘.")
        await finish_session(client, later, "s-c")
        system = await build_turn(client, builder, "Draft this week's 보고서, please.")
        assert "보고서는 요약부터 보여줘" in system and "표부터" not in system.split("## Memory Context")[0]
        current = (await client.rules("alice")).items
        assert [item.abstract for item in current] == ["보고서는 요약부터 보여줘."]
        history = await client.fact_history("alice", current[0].id)
        # The rule reaches the server twice (saved by the chat system, extracted from the transcript by the
        # semantic extractor), in either order: the history holds the old rule superseded and ends with
        # the new one current, whichever write came first.
        versions = [(v.value, v.status) for v in history.versions]
        assert ("보고서는 표부터 보여줘.", "superseded") in versions, versions
        assert versions[-1][0] == "보고서는 요약부터 보여줘." and versions[-1][1] != "superseded", versions
        old = next(v for v in history.versions if v.value == "보고서는 표부터 보여줘.")
        assert old.superseded_by is not None


GENERIC = [f"Always format {thing} as {style}." for thing in ("invoices", "tickets", "logs", "slides", "memos")
           for style in ("json", "yaml", "markdown", "csv", "html", "xml", "plain text", "bullets", "tables",
                         "numbered lists", "one line")]  # fmt: skip


async def test_with_sixty_rules_only_the_relevant_ones_fit_and_nobody_else_sees_them(write_stack: WriteStack) -> None:
    rules = [*GENERIC[:55], "보고서는 표부터 보여줘.", "회의록은 세 줄로 요약해줘.", "Never use emojis.",
             "Always answer in Korean.", "Always sign emails with my first name."]  # fmt: skip
    assert len(rules) == 60
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        for number, rule in enumerate(rules):
            saved = await client.save_rule("alice", rule, topic=f"t{number}")
            assert saved.outcome == "created", saved
        approval = "Approval takes two steps."  # a tenant rule: saved as group-visible, so every channel sees it
        await client.save_rule(SHARED_RULES_USER, approval, topic="approval", scope="org", channel="group")
        stored = [item.abstract for item in (await client.rules("alice")).items]
        assert sorted(stored) == sorted(rules)

        budget = 60
        assert sum(COUNTER.count_tokens(f"- {rule}") for rule in rules) > budget
        selected = select_rules(stored, "이번 주 보고서 작성해줘", budget, COUNTER)
        assert selected.ranked and selected.rules == ["보고서는 표부터 보여줘."] and selected.tokens <= budget
        assert select_rules(stored, "format the tickets as yaml", budget, COUNTER).rules[0] == (
            "Always format tickets as yaml."
        )

        shared = [item.abstract for item in (await client.rules(SHARED_RULES_USER)).items]
        assert shared == ["Approval takes two steps."]  # every user of the tenant loads these
        assert (await client.rules("bob")).items == []
        assert (await client.rules("alice", channel="group")).items == []

        builder, report = ContextBuilder(COUNTER, 4000), "이번 주 보고서 작성해줘"
        own = await aturn_context(client, builder, TurnRequest(user_id="alice", message=report, system_prompt="Hi."))
        assert "보고서는 표부터 보여줘." in own.messages[0].content and own.rules.ranked
        assert "Always format invoices as json." not in own.messages[0].content
        assert own.built.tokens["system"] <= own.built.budgets["system"]
        assert sum(d.what == "rule (not relevant to this turn)" for d in own.built.dropped) == len(own.rules.left_out)
        cases: list[tuple[str, Channel]] = [("bob", "private"), ("alice", "group")]
        for user, channel in cases:
            request = TurnRequest(user_id=user, message=report, system_prompt="Hi.", channel=channel)
            other = (await aturn_context(client, builder, request)).messages[0].content
            assert not [rule for rule in rules if rule in other], (user, channel)
            assert approval in other
    async with AsyncTiermemClient(write_stack.base_url, GLOBEX_KEY) as other_tenant:
        assert (await other_tenant.rules("alice")).items == []
        assert (await other_tenant.rules(SHARED_RULES_USER)).items == []


async def test_rules_said_in_a_session_are_extracted_by_the_server_and_a_contradiction_supersedes(
    write_stack: WriteStack,
) -> None:
    """No explicit save: the semantic extractor's offline path turns the user's rules into procedures."""
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:

        async def said(session_id: str, text: str, hours_ago: int, expect: set[str]) -> None:
            memory = WorkingMemory(COUNTER, 4000)
            memory.add("user", text)
            memory.add("assistant", "I will always answer in English.")  # the assistant's words state no rule
            event = memory.session_completed(tenant_id="acme", user_id="carol", agent_id="bot", session_id=session_id)
            ended = NOW - timedelta(hours=hours_ago)
            event = event.model_copy(update={"started_at": ended - timedelta(minutes=5), "ended_at": ended})
            await client.add_session(event)

            async def consolidated() -> bool:
                return (await client.event_status("carol", str(event.event_id))).state == "consolidated"

            await wait_for(consolidated, timeout_s=90, what=f"session {session_id} consolidated")

            async def extracted() -> bool:  # facts are written after the episode: wait for this rule
                # the extractor writes a session's facts one by one: wait for all of this session's rules
                return expect <= {rule.text for rule in (await client.procedures("carol")).rules}

            await wait_for(extracted, timeout_s=90, what=f"the rule of session {session_id}")

        await said(
            "r-1",
            "My flight lands at six. 보고서는 표부터 보여줘. Always answer in Korean.",
            3,
            {"보고서는 표부터 보여줘.", "Always answer in Korean."},
        )
        first = await client.procedures("carol", query="보고서 써줘")
        assert sorted((rule.topic, rule.text) for rule in first.rules) == [
            ("answer_language", "Always answer in Korean."),
            ("보고서", "보고서는 표부터 보여줘."),
        ]
        assert not first.ranked and first.omitted == 0 and "- 보고서는 표부터 보여줘." in first.section

        await said("r-2", "보고서는 요약부터 보여줘.", 1, {"보고서는 요약부터 보여줘."})
        now = await client.procedures("carol", query="보고서 써줘")
        assert sorted(rule.text for rule in now.rules) == ["Always answer in Korean.", "보고서는 요약부터 보여줘."]
        replaced = next(rule for rule in now.rules if rule.topic == "보고서")
        history = await client.fact_history("carol", replaced.id)
        assert (history.versions[0].value, history.versions[0].status) == ("보고서는 표부터 보여줘.", "superseded")
        assert (await client.procedures("dave")).rules == []  # another user of the tenant sees none of them


async def test_procedures_endpoint_ranks_under_the_budget_and_refuses_bad_input(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        for number, rule in enumerate([*GENERIC[:30], "보고서는 표부터 보여줘."]):
            await client.save_rule("erin", rule, topic=f"t{number}")
        await client.save_rule(SHARED_RULES_USER, "Approval takes two steps.", topic="approval", scope="org")
        everything = await client.procedures("erin", token_budget=8000)
        assert not everything.ranked and everything.total == 32 and len(everything.rules) == 32
        assert everything.rules[-1].owner == "tenant"  # the user's own rules first, the tenant's after
        narrowed = await client.procedures("erin", query="이번 주 보고서 작성해줘", token_budget=40)
        assert narrowed.ranked and narrowed.tokens <= 40
        assert [rule.text for rule in narrowed.rules] == ["보고서는 표부터 보여줘."]
        assert narrowed.omitted == 31 == len(narrowed.left_out)
        mine = await client.save_rule("erin", "Approval takes one step for me.", topic="approval")
        assert mine.outcome == "created"
        approvals = [r for r in (await client.procedures("erin", token_budget=8000)).rules if r.topic == "approval"]
        assert [(r.owner, r.text) for r in approvals] == [("user", "Approval takes one step for me.")]
        # Rules come through /v1/procedures: L0 does not spend its few entries on them again.
        recalled = await client.auto("erin", "이번 주 보고서 작성해줘")
        assert "보고서는 표부터" not in recalled.section and all(i.kind != "fact" for i in recalled.items), recalled
        with pytest.raises(InvalidRequestError) as refused:
            await client.procedures("erin", token_budget=0)
        assert refused.value.status == 422 and refused.value.errors
