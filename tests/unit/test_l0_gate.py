"""The L0 gate (agreement, distance from the top, one item per session, facts first) and the subject
check for abstention: pure functions, each rule shown to drop what it should and keep what it should."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.common.domain.facts import Fact, FactProvenance, make_fact_id
from services.common.gateways.keywords import KeywordEncoder, surface_terms
from services.common.stores.episodes import Episode, EpisodeHit, Passage, PassageHit
from services.common.stores.facts import FactHit, StoredFact
from services.recall_api.l0.detail import asks_for_value, detail_check, misses_the_detail
from services.recall_api.l0.gate import GateItem, L0GatePolicy, gate
from services.recall_api.l0.select import L0Policy, select_injection, stands_alone, term_overlap
from services.recall_api.l0.subject import (
    about_someone_else,
    known_speakers,
    people_asked_about,
    speaker_lines,
    subject_check,
)
from services.recall_api.retrieval.candidates import ScoreParts, best_hit_parts
from services.recall_api.retrieval.ranking import Ranked, episode_candidate, fact_candidate

OFF = L0GatePolicy(relative_margin=None, one_per_session=False)


def item(relevance: float, session: str, kind: str = "episode", dense: float = 0.5, keyword: float = 0.5) -> GateItem:
    return GateItem(kind=kind, relevance=relevance, sessions=frozenset({session}), dense=dense, keyword=keyword)


def test_everything_passes_with_every_rule_off() -> None:
    items = [item(0.6, "a"), item(0.5, "a"), item(0.31, "b")]
    assert gate(items, OFF) == [0, 1, 2]
    assert gate([], L0GatePolicy()) == []


def test_distance_from_the_top_is_relative_to_the_query() -> None:
    policy = L0GatePolicy(relative_margin=0.05, one_per_session=False)
    assert gate([item(0.62, "a"), item(0.58, "b"), item(0.5, "c")], policy) == [0, 1]
    # The same gap at a lower level: the gate adapts, an absolute threshold could not.
    assert gate([item(0.36, "a"), item(0.32, "b"), item(0.24, "c")], policy) == [0, 1]


def test_agreement_needs_both_halves_of_the_score() -> None:
    policy = L0GatePolicy(relative_margin=None, min_dense=0.1, min_keyword=0.1, one_per_session=False)
    keyword_only = item(0.5, "a", dense=0.0, keyword=0.9)
    dense_only = item(0.45, "b", dense=0.9, keyword=0.0)
    both = item(0.4, "c", dense=0.3, keyword=0.4)
    unknown = GateItem(kind="episode", relevance=0.35, sessions=frozenset({"d"}))
    assert gate([keyword_only, dense_only, both, unknown], policy) == [2, 3]


def test_dense_agreement_is_relative_to_the_querys_best() -> None:
    policy = L0GatePolicy(relative_margin=0.03, min_dense_share=0.3, one_per_session=False)
    # Ranked first on one shared everyday word, several times further in meaning than the second: the
    # second becomes the top and is the one injected.
    shared_word = item(0.41, "certificate", dense=0.07, keyword=0.55)
    close_in_meaning = item(0.31, "trip", dense=0.30, keyword=0.32)
    assert gate([shared_word, close_in_meaning], policy) == [1]
    assert gate([shared_word, close_in_meaning], L0GatePolicy(relative_margin=0.03, one_per_session=False)) == [0]
    # A share, not a bar: the same ratio at a higher level gives the same answer, and unknown parts pass.
    assert gate([item(0.6, "a", dense=0.21), item(0.5, "b", dense=0.9)], policy) == [1]
    unknown = GateItem(kind="episode", relevance=0.6, sessions=frozenset({"c"}))
    assert gate([unknown, item(0.59, "b", dense=0.9)], policy) == [0, 1]


def test_the_top_is_taken_after_agreement() -> None:
    policy = L0GatePolicy(relative_margin=0.05, min_dense=0.1, one_per_session=False)
    assert gate([item(0.9, "a", dense=0.0), item(0.5, "b"), item(0.47, "c")], policy) == [1, 2]


def test_one_item_per_session_with_the_fact_first() -> None:
    policy = L0GatePolicy(relative_margin=None, fact_margin=0.05)
    episode, other_episode = item(0.6, "s1"), item(0.55, "s2")
    fact_same_session = item(0.57, "s1", kind="fact")
    assert gate([episode, other_episode, fact_same_session], policy) == [2, 1]
    # A fact much less relevant than its session's episode does not replace it (and adds nothing new).
    weak_fact = item(0.4, "s1", kind="fact")
    assert gate([episode, other_episode, weak_fact], policy) == [0, 1]
    # Two episodes of one session (e.g. a passage hit and a summary hit): the first one only.
    assert gate([item(0.6, "s1"), item(0.59, "s1"), item(0.5, "s2")], policy) == [0, 2]


# ---- subject attribution -------------------------------------------------------------------------

ENCODER = KeywordEncoder()
PASSAGE = (
    "Caroline: I ran a charity race for mental health last Saturday.\n"
    "Melanie: That's amazing! How did it feel?\n"
    "Caroline: It made me realise that self-care is important."
)


def test_speaker_lines_and_known_speakers() -> None:
    lines = speaker_lines(PASSAGE + "\nno label here")
    assert [line.speaker for line in lines] == ["Caroline", "Melanie", "Caroline", None]
    assert known_speakers([PASSAGE, "민수: 내일 배포해요"]) == {"caroline", "melanie", "민수"}
    assert people_asked_about("민수가 뭘 배포했지?", {"민수", "caroline"}) == {"민수"}
    assert people_asked_about("What did Carolines do?", {"caroline"}) == set()


def test_a_memory_about_someone_else_is_recognised() -> None:
    speakers = known_speakers([PASSAGE])
    asked_of_melanie = subject_check("What did Melanie realise after the charity race?", speakers, ENCODER.tokens)
    assert asked_of_melanie is not None and asked_of_melanie.person == "melanie"
    assert "melanie" not in asked_of_melanie.terms
    assert about_someone_else(asked_of_melanie, PASSAGE, ENCODER.tokens)
    asked_of_caroline = subject_check("What did Caroline realise after the charity race?", speakers, ENCODER.tokens)
    assert asked_of_caroline is not None
    assert not about_someone_else(asked_of_caroline, PASSAGE, ENCODER.tokens)


def test_lines_spoken_to_the_listener_or_naming_the_person_are_not_someone_elses() -> None:
    speakers = {"caroline", "melanie"}
    check = subject_check("What are Melanie's pets' names?", speakers, ENCODER.tokens)
    assert check is not None
    assert not about_someone_else(
        check, "Caroline: They're adorable! What are their names? Pets are joy.", ENCODER.tokens
    )
    assert not about_someone_else(check, "Caroline: Melanie's pets are named Oliver and Luna.", ENCODER.tokens)
    assert about_someone_else(check, "Caroline: My pets are named Oliver and Luna.", ENCODER.tokens)


def test_no_check_without_exactly_one_known_speaker_in_the_query() -> None:
    speakers = {"caroline", "melanie"}
    assert subject_check("What did they do at the race?", speakers, ENCODER.tokens) is None
    assert subject_check("Did Caroline and Melanie both run?", speakers, ENCODER.tokens) is None


def test_a_fact_about_another_known_speaker_is_theirs() -> None:
    check = subject_check("Where does Melanie live?", {"caroline", "melanie"}, ENCODER.tokens)
    assert check is not None
    assert about_someone_else(check, "Caroline lives in Seattle.", ENCODER.tokens, subject="Caroline")
    assert not about_someone_else(check, "Melanie lives in Boston.", ENCODER.tokens, subject="Melanie")
    # A subject that is no known speaker ("user", a project) decides nothing.
    assert not about_someone_else(check, "The user lives in Boston.", ENCODER.tokens, subject="user")


# ---- the selection as AutoRecall runs it ---------------------------------------------------------

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def episode(session: str, summary: str) -> Episode:
    return Episode(
        episode_id=f"00000000-0000-4000-8000-{abs(hash(session)) % 10**12:012d}",
        session_id=session,
        agent_id="agent",
        occurred_at=NOW,
        expires_at=datetime(2027, 5, 1, tzinfo=UTC),
        summary=summary,
        abstract=summary.splitlines()[0],
    )


def ranked(candidate_relevance: list[tuple[Episode, float]]) -> list[Ranked]:
    return [
        Ranked(episode_candidate(e, r, passage_text=e.summary), r, 0, NOW, "2026-05-01") for e, r in candidate_relevance
    ]


def test_selection_gates_and_abstains_when_every_near_top_memory_is_someone_elses() -> None:
    race = episode("s1", PASSAGE)
    other = episode("s2", "Melanie: I painted a lake sunrise with my kids.\nCaroline: Lovely!")
    policy = L0Policy(gate=L0GatePolicy(relative_margin=0.05))
    items = ranked([(race, 0.6), (other, 0.4)])
    asked_of_caroline = select_injection(items, {}, "What did Caroline realise after the race?", ENCODER.tokens, policy)
    assert [r.candidate.id for r in asked_of_caroline.chosen] == [race.episode_id]
    assert "gated" in asked_of_caroline.dropped[other.episode_id]
    asked_of_melanie = select_injection(items, {}, "What did Melanie realise after the race?", ENCODER.tokens, policy)
    assert asked_of_melanie.chosen == []
    assert "someone other than melanie" in asked_of_melanie.dropped[race.episode_id]
    no_subject_check = L0Policy(gate=policy.gate, subject_attribution=False)
    kept = select_injection(items, {}, "What did Melanie realise after the race?", ENCODER.tokens, no_subject_check)
    assert [r.candidate.id for r in kept.chosen] == [race.episode_id]


def test_score_parts_come_from_each_memorys_best_hit() -> None:
    first = episode("s1", "Caroline: one")
    passage = Passage(
        episode_id=first.episode_id, index=0, text="x", first_turn=0, last_turn=1, session_id="s1",
        agent_id="agent", occurred_at=NOW,
    )  # fmt: skip
    fact = Fact(
        fact_id=make_fact_id("acme", "alice", "personal", "Caroline", "lives_in", "Seattle"),
        tenant_id="acme",
        user_id="alice",
        scope="personal",
        subject="Caroline",
        attribute="lives_in",
        value="Seattle",
        text="Caroline lives in Seattle.",
        language="en",
        volatility="low",
        status="confirmed",
        evidence_count=1,
        single_valued=True,
        valid_from=NOW,
        provenance=[FactProvenance(episode_id=first.episode_id, session_id="s1", occurred_at=NOW, source="extraction")],
        created_at=NOW,
        updated_at=NOW,
    )
    stored = StoredFact(fact=fact)
    parts = best_hit_parts(
        [EpisodeHit(first, 0.4, 0.5, 0.3)],
        [PassageHit(passage, 0.6, 0.2, 0.9)],
        [FactHit(stored, 0.5, None, 0.7)],
    )
    assert parts[first.episode_id] == ScoreParts(dense=0.2, keyword=0.9)
    assert parts[stored.fact_id] == ScoreParts(dense=None, keyword=0.7)
    assert fact_candidate(stored, 0.5).fact is fact
    # Confirmed facts stand alone; a tentative one read from a conversation needs its episode, a saved one not.
    assert stands_alone(fact_candidate(stored, 0.5))
    tentative = StoredFact(fact=fact.model_copy(update={"status": "tentative"}))
    assert not stands_alone(fact_candidate(tentative, 0.5))
    api = fact.provenance[0].model_copy(update={"source": "api"})
    saved = StoredFact(fact=fact.model_copy(update={"status": "tentative", "provenance": [api]}))
    assert stands_alone(fact_candidate(saved, 0.5))


# ---- detail coverage ----------------------------------------------------------------------------


def test_a_memory_that_knows_the_topic_but_not_the_detail_is_left_out() -> None:
    trip = "사용자: 어머니 생신이 다음 달 3일이라 올해는 가족 여행으로 제주도에 가기로 했어."
    check = detail_check("제주도 가는 비행기 몇 시 출발로 예약했지?", {"제주도", "사용자"}, ENCODER.tokens)
    assert check is not None and check.entities == {"제주도"}
    assert "비행기" in check.details and "가다" not in check.details  # a verb says nothing about the detail
    assert misses_the_detail(check, trip, ENCODER.tokens, dense=0.1, max_dense=0.2)
    # Close in meaning: kept whatever its words.
    assert not misses_the_detail(check, trip, ENCODER.tokens, dense=0.5, max_dense=0.2)
    flight = "사용자: 제주도 비행기는 아침 9시 출발로 예약했어."
    assert not misses_the_detail(check, flight, ENCODER.tokens, dense=0.1, max_dense=0.2)


def test_the_entity_word_is_not_a_detail_and_no_entity_means_no_check() -> None:
    check = detail_check("한빛페이 데이터베이스는 뭘로 하기로 했지?", {"한빛"}, ENCODER.tokens)
    assert check is not None and "페이" not in check.details and "데이터" in check.details
    decision = "한빛페이 결제 서비스는 자바에서 Go로 다시 작성하기로 결정했어."
    assert misses_the_detail(check, decision, ENCODER.tokens, dense=None, max_dense=0.2)
    assert detail_check("What did Caroline research for adoption?", {"melanie"}, ENCODER.tokens) is None
    english = detail_check("What did Caroline research for adoption?", {"caroline"}, ENCODER.tokens)
    # The action is not asked for, but saying it covers the question (question_roles.py).
    assert english is not None and english.details == {"adoption"} and english.roles == {"research"}
    assert not misses_the_detail(english, "Caroline: I research adoption agencies.", ENCODER.tokens, 0.0, 0.2)
    assert not misses_the_detail(english, "Caroline: I did some research.", ENCODER.tokens, 0.0, 0.2)
    assert misses_the_detail(english, "Caroline: I went hiking.", ENCODER.tokens, 0.0, 0.2)


def test_only_a_question_asking_for_a_value_gets_the_detail_check() -> None:
    # A value is asked (what, when, how many; 뭐, 몇, 언제, 누구, 어떤), also through particles and contractions.
    for question in (
        "한빛페이 데이터베이스는 뭘로 하기로 했지?",
        "제주도 가는 비행기 몇 시 출발로 예약했지?",
        "누가 리뷰 맡기로 했지?",
        "어떤 언어로 바꿨지?",
        "When did Caroline go to the support group?",
        "How many kids does Melanie have?",
    ):
        assert asks_for_value(question), question
    # How something went, why, and requests are answered by the topic itself.
    for question in (
        "한빛페이 작업 일정이 어떻게 됐더라?",
        "바질 잎이 노랗게 변하는데 왜 그럴까?",
        "다시 운동 시작하려는데 이번 달 루틴 좀 짜 줄래?",
        "How is Caroline's adoption going?",
        "Why did Melanie start painting?",
        "Plan my week around the Tuesday meeting.",
    ):
        assert not asks_for_value(question), question
    assert detail_check("한빛페이 작업 일정이 어떻게 됐더라?", {"한빛"}, ENCODER.tokens) is None
    assert detail_check("How did Caroline feel after the race?", {"caroline"}, ENCODER.tokens) is None


@pytest.mark.parametrize(
    ("texts", "question"),
    [
        (
            (
                "Weekly standup with the design team: the launch slips to Friday.",
                "Weekly standup with the design team: the launch slips to Friday (again).",
                "Caroline: I signed up for the pottery class on Friday.",
            ),
            "what happens on Friday?",
        ),
        (  # said again with other particles: still a repeat
            (
                "매주 월요일 디자인팀 스탠드업에서 출시가 금요일로 밀렸다.",
                "매주 월요일 디자인팀 스탠드업: 출시는 금요일로 또 밀렸다.",
                "디자인팀 회식은 금요일 저녁 을지로에서 한다.",
            ),
            "금요일에 뭐 있었지?",
        ),
    ],
)
def test_a_memory_repeating_a_chosen_one_is_left_out(texts: tuple[str, str, str], question: str) -> None:
    assert term_overlap({"a", "b", "c"}, {"a", "b", "c", "d"}) == 1.0
    assert term_overlap(set(), {"a"}) == 0.0
    standup, again, other = (episode(f"s{number}", text) for number, text in enumerate(texts, 1))
    items = ranked([(standup, 0.6), (again, 0.59), (other, 0.58)])
    policy = L0Policy(gate=L0GatePolicy(relative_margin=0.05))
    selection = select_injection(items, {}, question, ENCODER.tokens, policy)
    assert [r.candidate.id for r in selection.chosen] == [standup.episode_id, other.episode_id]
    assert selection.dropped[again.episode_id] == f"repeats {standup.episode_id}"
    no_check = L0Policy(gate=policy.gate, max_overlap=None)
    assert len(select_injection(items, {}, question, ENCODER.tokens, no_check).chosen) == 3


def test_the_checks_stop_at_the_limit_and_keep_the_same_first_items() -> None:
    """The subject check tokenises the item's text (Kiwi for Korean): items past the ones a turn
    injects are never tokenised, and a limit changes nothing about the items before it."""
    standup = episode("s1", "Caroline: weekly standup with the design team, the launch slips to Friday.")
    again = episode("s2", "Caroline: weekly standup with the design team, the launch slips to Friday (again).")
    other = episode("s3", "Caroline: I signed up for the pottery class on Friday.")
    last = episode("s4", "Caroline: the kiln firing moved to Friday evening.")
    items = ranked([(standup, 0.6), (again, 0.59), (other, 0.58), (last, 0.57)])
    policy = L0Policy(gate=L0GatePolicy(relative_margin=0.05))
    tokenised: list[str] = []

    def tokens(text: str) -> list[str]:
        tokenised.append(text)
        return ENCODER.tokens(text)

    question = "How is Caroline doing with Friday?"
    everything = select_injection(items, {}, question, tokens, policy)
    assert len(everything.chosen) == 3
    tokenised.clear()
    first_two = select_injection(items, {}, question, tokens, policy, limit=2)
    assert first_two.chosen == everything.chosen[:2]
    assert first_two.dropped[again.episode_id] == f"repeats {standup.episode_id}"
    assert last.episode_id not in first_two.dropped
    # The subject check reads each speaker's line of the item.
    assert any("pottery" in text for text in tokenised) and not any("kiln" in text for text in tokenised)


def test_surface_terms_compare_wording_without_analysis() -> None:
    """The redundancy check's terms: words as the keyword encoder has them, Hangul as two-syllable
    windows, so a Korean statement said again with other particles still repeats the first."""
    assert surface_terms("The launches slipped to Friday") == {"launche", "slipped", "friday"}
    first = surface_terms("매주 월요일 디자인팀 스탠드업에서 출시가 금요일로 밀렸다")
    again = surface_terms("매주 월요일 디자인팀 스탠드업: 출시는 금요일로 또 밀렸다")
    other = surface_terms("디자인팀 회식은 금요일 저녁 을지로에서 한다")
    assert term_overlap(first, again) >= 0.8 > term_overlap(first, other)
    assert surface_terms("밥") == {"#밥"}


def test_a_tentative_fact_needs_its_sessions_episode() -> None:
    policy = L0GatePolicy(relative_margin=0.05)
    tentative = GateItem(kind="fact", relevance=0.7, sessions=frozenset({"s9"}), standalone=False)
    episodes = [item(0.5, "s1"), item(0.48, "s2")]
    # It neither sets the top (the episodes stay) nor gets in without its session's episode.
    assert gate([*episodes, tentative], policy) == [0, 1]
    # With nothing firmer to go by, it is judged like any other item.
    assert gate([tentative], policy) == [0]
    # Beside its session's episode it takes the episode's place (facts first).
    with_its_episode = GateItem(kind="fact", relevance=0.7, sessions=frozenset({"s1"}), standalone=False)
    assert gate([*episodes, with_its_episode], policy) == [2, 1]


def test_addressing_someone_is_not_talking_about_them() -> None:
    check = subject_check("What was grandma's gift to Melanie?", {"caroline", "melanie"}, ENCODER.tokens)
    assert check is not None
    thanks = "Caroline: Thanks, Melanie! This necklace was a gift from my grandma in Sweden."
    assert about_someone_else(check, thanks, ENCODER.tokens)
    about_her = "Caroline: Melanie's grandma gave her a necklace as a gift."
    assert not about_someone_else(check, about_her, ENCODER.tokens)


def test_a_korean_query_is_analysed_once_per_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """L0 analyses the query while it embeds (`prepare_query`); the detail check then reads the same
    morphemes twice (its interrogative, its nouns) without analysing the query again."""
    from services.common.gateways import kiwi
    from services.recall_api.l0 import detail as l0_detail

    analysed: list[str] = []
    tokenize = kiwi.tokenize

    def counting(text: str) -> list[Any]:
        analysed.append(text)
        return tokenize(text)

    monkeypatch.setattr(kiwi, "tokenize", counting)
    query = "수요일 민지 생일 파티는 몇 시였지? (analysed once)"
    ENCODER.encode_query(query)  # the keyword form, which L0 encodes first (its terms are kept)
    l0_detail.prepare_query(query)
    assert analysed == [query, query]
    assert asks_for_value(query)
    assert detail_check(query, {"민지"}, ENCODER.tokens) is not None
    assert analysed.count(query) == 2  # its words (ENCODER) and its morphemes, each once
    analysed.clear()
    l0_detail.prepare_query("What time was Minji's party? (analysed once)")
    assert analysed == []


def test_speaker_labels_of_a_long_text_are_read_but_not_kept() -> None:
    from services.recall_api.l0 import subject as l0_subject

    l0_subject._cached_speakers.cache_clear()
    long_text = "Alice: I moved to Busan\n" + "and then " * 1_000
    assert l0_subject.known_speakers([long_text]) == {"alice"}
    assert l0_subject._cached_speakers.cache_info().currsize == 0
    assert l0_subject.known_speakers(["Bob: see you", "Bob: see you"]) == {"bob"}
    assert l0_subject._cached_speakers.cache_info().currsize == 1
