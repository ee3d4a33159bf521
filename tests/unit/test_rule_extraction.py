"""Rules stated by the user become procedure facts on the extractor's path (offline, English and
Korean), with the same topics as the client's own recognition, so both paths supersede each other."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiermem_client.procedures import extract_rules
from tiermem_client.sentences import split_sentences as client_split_sentences

from contracts import Message, SessionCompleted
from services.common.domain.facts import FactProvenance
from services.common.domain.sentences import split_sentences
from services.recall_api.facts.procedures import ProcedureRule, relevance, select_procedures
from services.semantic_extractor.rules import rules_in_messages, stated_rules, user_messages, with_stated_rules
from services.semantic_extractor.schema import ExtractedFact, ExtractionOutput, to_fact_candidates

CORPUS = [
    "보고서는 표부터 보여줘.",
    "보고서는 요약부터 보여줘",
    "앞으로 한국어로 답해줘",
    "Always answer in Korean.",
    "From now on, reply in English please.",
    "Never use emojis in emails.",
    "회의록은 세 줄로 요약해줘.",
    "항상 존댓말로 해줘.",
    "By default, send invoices as PDF.",
    "I moved to Busan last month.",
    "이거 좀 봐줘.",
    "What do you always do?",
    "나는 부산에 살아",
    "Going forward, keep answers under five sentences.",
    "나는 커피 좋아해.",
    "앞으로 존댓말 해.",
    "나는 관리자라고 저장해줘.",
    "I always walk my dog in the morning.",
    "My dog never barks.",
    "I want you to always cite sources.",
    "The report should always start with a table.",
    "Always cc Dr. Kim on weekly reports.",
    "1. Always answer in Korean.\n2. 보고서는 표부터 보여줘.",
    "Never use e.g. or i.e. in summaries. 앞으로 존댓말로 해줘。항상 표부터 보여줘.",
    'Always say "done." Then stop.',
]


@pytest.mark.parametrize("said", CORPUS)
def test_the_extractor_and_the_client_recognise_the_same_rules_with_the_same_topics(said: str) -> None:
    server = [(rule.topic, rule.text) for rule in stated_rules(said)]
    client = [(rule.topic, rule.text) for rule in extract_rules(said)]
    assert server == client


# Pieces that make sentence boundaries hard: abbreviations, initials, list numbers, decimals, quotes,
# full-width terminators, Korean endings, line breaks.
_SENTENCE_PIECES = ["Dr.", "Mr.", "e.g.", "J.", "K.", "1.", "3.5", "Node.js", "U.S.", " ", " ", "\n", ".", "!", "?",
                    "…", "。", "！", '"', "'", ")", "Always", "answer", "in", "Korean", "보고서는", "표부터", "보여줘",
                    "했어요.", "R", "a", "I"]  # fmt: skip


_SENTENCE_CASES = [
    "Ask Dr. Kim now. Mrs. Lee agrees.",
    "Use e.g. Go, i.e. a compiled language. D.G.I.A. is great.",
    "The book is by J. K. Rowling. I use R. My friend uses Python.",
    "1. First item here\n2. Second item. 3.5 is a number, Node.js a name.",
    'She said "done." Then left… 좋아요。다음！ 정말?',
    "저는 서울에 살아요. 커피를 좋아해요!\n고마워요",
    "I work in the sales dept. of Acme Corp. now.",
]


@pytest.mark.parametrize("text", _SENTENCE_CASES)
def test_the_client_and_the_server_split_these_sentences_alike(text: str) -> None:
    assert client_split_sentences(text) == split_sentences(text)


@given(st.lists(st.sampled_from(_SENTENCE_PIECES), max_size=40).map("".join))
@settings(max_examples=500, deadline=None, database=None)
def test_the_client_splits_sentences_exactly_as_the_server_does(text: str) -> None:
    """The client restates the server's splitter (it installs without the server): one algorithm."""
    assert client_split_sentences(text) == split_sentences(text)


def test_a_rule_is_one_whole_sentence_even_with_an_abbreviation_or_a_list_number() -> None:
    assert [rule.text for rule in stated_rules("Always cc Dr. Kim on weekly reports.")] == [
        "Always cc Dr. Kim on weekly reports."
    ]
    listed = stated_rules("1. Always answer in Korean.\n2. 보고서는 표부터 보여줘.")
    assert [(rule.topic, rule.text) for rule in listed] == [
        ("answer_language", "Always answer in Korean."),
        ("보고서", "보고서는 표부터 보여줘."),
    ]


def test_rules_are_found_in_english_and_korean_and_chatter_is_not() -> None:
    said = "I moved to Busan. 보고서는 표부터 보여줘. Always answer in Korean. 이거 좀 봐줘. Can you always?"
    assert [(r.topic, r.attribute) for r in stated_rules(said)] == [
        ("보고서", "procedure_보고서"),
        ("answer_language", "procedure_answer_language"),
    ]
    assert stated_rules("앞으로 영어로 대답해 주세요")[0].topic == "answer_language"
    assert stated_rules("from now on always reply in English")[0].topic == "answer_language"
    assert stated_rules("나는 부산에 살아") == stated_rules("Where do I live?") == []


@pytest.mark.parametrize(
    "said",
    ["나는 커피 좋아해.", "그는 항상 늦게 와.", "I always walk my dog in the morning.", "My dog never barks.",
     "We never eat meat.", "나는 관리자라고 저장해줘.", "이거 좀 봐줘.", "Do you always do that?"],
)  # fmt: skip
def test_statements_habits_and_one_off_requests_are_not_rules(said: str) -> None:
    assert stated_rules(said) == []


@pytest.mark.parametrize(
    ("said", "topic"),
    [("앞으로 존댓말 해.", "앞으로_존댓말_해"), ("I want you to always cite sources.", "cite"),
     ("The report should always start with a table.", "report"), ("회의록은 세 줄로 요약해줘.", "회의록"),
     ("Please never use emojis.", "emoji")],
)  # fmt: skip
def test_rules_addressed_to_the_assistant_are_found_with_their_topic(said: str, topic: str) -> None:
    assert [rule.topic for rule in stated_rules(said)] == [topic]


def test_within_a_session_the_users_last_word_on_a_topic_wins() -> None:
    rules = rules_in_messages(["보고서는 표부터 보여줘.", "Always answer in Korean.", "보고서는 요약부터 보여줘."])
    assert [(r.topic, r.text) for r in rules] == [
        ("answer_language", "Always answer in Korean."),
        ("보고서", "보고서는 요약부터 보여줘."),
    ]


def _session(*messages: tuple[str, str]) -> SessionCompleted:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    return SessionCompleted(
        event_id=uuid.uuid4(),
        channel="private",
        tenant_id="acme",
        user_id="alice",
        agent_id="bot",
        session_id="s1",
        started_at=now,
        ended_at=now,
        messages=[Message(role=role, content=content) for role, content in messages],  # type: ignore[arg-type]
    )


def test_only_the_users_own_messages_state_rules_and_model_guesses_on_a_topic_are_replaced() -> None:
    session = _session(("assistant", "I will always answer in English."), ("user", "보고서는 표부터 보여줘."))
    model_guess = ExtractedFact(subject="procedure", attribute="procedure_보고서", value="tables", text="Tables first.")
    other = ExtractedFact(subject="user", attribute="lives_in", value="Busan", text="The user lives in Busan.")
    output = with_stated_rules(ExtractionOutput(facts=[model_guess, other]), user_messages(session))
    assert [(f.subject, f.attribute, f.value) for f in output.facts] == [
        ("user", "lives_in", "Busan"),
        ("procedure", "procedure_보고서", "보고서는 표부터 보여줘."),
    ]
    assert user_messages(None) == [] and with_stated_rules(output, []) is output


def test_a_rule_becomes_a_single_valued_low_volatility_candidate_of_the_write_policy() -> None:
    from datetime import UTC, datetime

    from services.common.domain.fact_attributes import attribute_spec

    output = with_stated_rules(ExtractionOutput(), ["Always answer in Korean."])
    provenance = FactProvenance(episode_id="e1", occurred_at=datetime(2026, 1, 1, tzinfo=UTC), source="extraction")
    [candidate] = to_fact_candidates(
        output, tenant_id="acme", user_id="alice", scope="personal", language="en", provenance=provenance
    )
    assert (candidate.subject, candidate.attribute, candidate.value) == (
        "procedure",
        "procedure_answer_language",
        "Always answer in Korean.",
    )
    assert attribute_spec(candidate.attribute).single_valued


def _rule(number: int, text: str) -> ProcedureRule:
    from datetime import UTC, datetime

    since = datetime(2026, 1, 1 + number % 28, tzinfo=UTC)
    return ProcedureRule(id=f"r{number}", topic=f"t{number}", text=text, owner="user", scope="personal", since=since)


def test_all_rules_while_they_fit_else_only_relevant_ones_within_the_budget() -> None:
    def count(text: str) -> int:
        return len(text.split())

    few = [_rule(0, "보고서는 표부터 보여줘."), _rule(1, "Never use emojis.")]
    assert select_procedures(few, "hello", 100, count).chosen == few
    many = [_rule(i, f"Always format item{i} as yaml.") for i in range(40)] + [_rule(99, "보고서는 표부터 보여줘.")]
    picked = select_procedures(many, "이번 주 보고서 작성해줘", 12, count)
    assert picked.ranked and [r.text for r in picked.chosen] == ["보고서는 표부터 보여줘."]
    assert picked.tokens <= 12 and picked.chosen[0].relevance == pytest.approx(
        relevance("보고서는 표부터 보여줘.", "이번 주 보고서 작성해줘"), abs=1e-4
    )
    newest = select_procedures(many, None, 12, count)
    assert newest.tokens <= 12 and len(newest.chosen) == 2
    assert all(r.since >= max(x.since for x in many if x not in newest.chosen) for r in newest.chosen)
