"""The evaluation's pure parts on tiny hand-made fixtures with known answers: LoCoMo parsing and event
building, the baselines' ranking functions, recall@k, the L0 rates, comparisons and targets, and the
scenario set's validation and scoring."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tiermem_lab.benchmarks.recall import parse_args, recall_argv
from tiermem_lab.benchmarks.synthetic import synthetic_sessions
from tiermem_lab.evaluation.baselines import (
    BASELINES,
    BM25,
    DENSE,
    DENSE_PASSAGES,
    OURS,
    PASSAGES,
    Bm25,
    TurnCorpus,
    latest_sessions,
    pool_passage_idf,
    ranked_indexes,
    reciprocal_rank_fusion,
    sessions_by_best_turn,
    unique_in_order,
)
from tiermem_lab.evaluation.harness import sweep_thresholds
from tiermem_lab.evaluation.locomo import (
    LocomoFormatError,
    dia_session,
    load_locomo,
    parse_locomo,
    parse_session_time,
    session_events,
    split_evidence,
    turn_text,
)
from tiermem_lab.evaluation.metrics import (
    InjectedItem,
    QuestionResult,
    abstention_stats,
    build_report,
    compare,
    hit_at_k,
    l0_stats,
    l0_table,
    l0_tradeoff,
    recall_table,
    target_checks,
)
from tiermem_lab.evaluation.plot import draw_recall_png
from tiermem_lab.evaluation.report import unreadable_evidence_line
from tiermem_lab.evaluation.scenarios import (
    DEFAULT_SCENARIOS,
    ProbeOutcome,
    ScenarioFormatError,
    load_scenarios,
    parse_scenarios,
    scenario_events,
    summarize_outcomes,
)

# ---- LoCoMo parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("9:55 am on 22 October, 2023", datetime(2023, 10, 22, 9, 55, tzinfo=UTC)),
        ("12:05 am on 1 Jan, 2024", datetime(2024, 1, 1, 0, 5, tzinfo=UTC)),
        ("12:30 pm on 29 February, 2024", datetime(2024, 2, 29, 12, 30, tzinfo=UTC)),
        ("7:00 P.M. on 3 sept 2022", datetime(2022, 9, 3, 19, 0, tzinfo=UTC)),
    ],
)
def test_session_times_are_parsed(text: str, expected: datetime) -> None:
    assert parse_session_time(text) == expected


@pytest.mark.parametrize(
    "text", ["", "13:00 pm on 1 May, 2023", "1:56 pm on 31 June, 2023", "1:56 pm on 8 Mai, 2023", "8 May 2023"]
)
def test_bad_session_times_are_rejected_clearly(text: str) -> None:
    with pytest.raises(LocomoFormatError):
        parse_session_time(text)


def test_dialogue_ids_map_to_sessions_and_packed_evidence_is_split() -> None:
    assert dia_session("D3:12") == 3
    assert dia_session(" D30:1 ") == 30
    assert split_evidence(["D8:6; D9:17", "D1:2"]) == ("D8:6", "D9:17", "D1:2")
    assert dia_session("D:11:26") == 11
    with pytest.raises(LocomoFormatError):
        dia_session("S3:12")


def test_a_shared_photo_becomes_its_caption() -> None:
    assert (
        turn_text({"text": "Look!", "blip_caption": "a photo of a dog"}) == "Look! [shares a photo: a photo of a dog]"
    )
    assert turn_text({"text": "", "blip_caption": "a cake"}) == "[shares a photo: a cake]"
    assert turn_text({"text": "  no   photo "}) == "no photo"


def locomo_fixture() -> list[dict[str, Any]]:
    return [
        {
            "sample_id": "conv 1",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bo",
                "session_1_date_time": "1:00 pm on 1 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                    {"speaker": "Bo", "dia_id": "D1:2", "text": "Cute!", "blip_caption": "a photo of a cat"},
                ],
                "session_2_date_time": "2:00 pm on 3 May, 2023",
                "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I started running."}],
                "session_3_date_time": "2:00 pm on 9 May, 2023",  # never held: no turns
                "session_1_summary": "ignored",
            },
            "qa": [
                {"question": "What did Ann adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
                {"question": "What did Ann run?", "adversarial_answer": "a race", "evidence": ["D2:1"], "category": 5},
                {"question": "Both?", "answer": "x", "evidence": ["D1:1; D2:1"], "category": 1},
            ],
        }
    ]


def test_locomo_samples_keep_sessions_speakers_and_evidence_sessions() -> None:
    (sample,) = parse_locomo(locomo_fixture())
    assert sample.user_id == "conv-1"
    assert [s.number for s in sample.sessions] == [1, 2]
    assert sample.sessions[0].turns[1].text == "Cute! [shares a photo: a photo of a cat]"
    assert [q.evidence_sessions for q in sample.questions] == [frozenset({1}), frozenset({2}), frozenset({1, 2})]
    assert sample.questions[1].answer == "a race"


def test_unreadable_evidence_is_set_aside_and_reported_not_fatal() -> None:
    # The released LoCoMo conversations have both quirks: an entry "D" alone and "D:11:26" with a stray colon.
    data = locomo_fixture()
    data[0]["qa"][0]["evidence"] = ["D", "D:2:1"]
    data[0]["qa"][2]["evidence"] = ["D"]
    (sample,) = parse_locomo(data)
    first, _, last = sample.questions
    assert first.evidence_sessions == frozenset({2}) and first.unreadable_evidence == ("D",)
    assert last.evidence_sessions == frozenset() and last.unreadable_evidence == ("D",)
    assert sample.questions[1].unreadable_evidence == ()
    line = unreadable_evidence_line({"unreadable_evidence": [{"sample_id": "conv-1", "question": 0, "entries": ["D"]}]})
    assert line is not None and "conv-1 q0 ['D']" in line
    assert unreadable_evidence_line({"unreadable_evidence": []}) is None


def test_the_release_per_conversation_files_and_their_folder_load_as_samples(tmp_path: Path) -> None:
    # The release's locomo10_v2 folder: one file per conversation, named by its number, the speakers,
    # sessions and qa at the top level (plus per-session events, not needed).
    (sample,) = locomo_fixture()
    folder = tmp_path / "locomo10_v2"
    folder.mkdir()
    for number in (41, 7):
        conversation = {**sample["conversation"], "events_session_1": {"Ann": ["adopted a cat"]}, "qa": sample["qa"]}
        (folder / f"{number}.json").write_text(json.dumps(conversation), encoding="utf-8")
    assert [s.sample_id for s in load_locomo(folder)] == ["conv-7", "conv-41"]
    (one,) = load_locomo(folder / "41.json")
    assert [s.number for s in one.sessions] == [1, 2] and len(one.questions) == 3
    listed = tmp_path / "locomo10.json"
    listed.write_text(json.dumps(locomo_fixture()), encoding="utf-8")
    assert [s.sample_id for s in load_locomo(listed)] == ["conv 1"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b'{"speaker_a": "Ann"}', "neither"), (b"\xff\xfe[]", "UTF-8"), (b"[{", "invalid JSON")],
)
def test_a_file_in_no_locomo_shape_is_a_format_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(LocomoFormatError, match=reason):
        load_locomo(path)


def test_a_sample_given_twice_is_a_format_error(tmp_path: Path) -> None:
    (sample,) = locomo_fixture()
    (tmp_path / "locomo10.json").write_text(json.dumps([sample]), encoding="utf-8")
    (tmp_path / "1.json").write_text(json.dumps({**sample["conversation"], "qa": sample["qa"]}), encoding="utf-8")
    with pytest.raises(LocomoFormatError, match="given twice: conv-1"):
        load_locomo(tmp_path)


def test_a_folder_without_json_files_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(LocomoFormatError, match=r"no \.json files"):
        load_locomo(tmp_path)


def test_an_unknown_speaker_is_a_format_error() -> None:
    data = locomo_fixture()
    data[0]["conversation"]["session_2"][0]["speaker"] = "Cy"
    with pytest.raises(LocomoFormatError, match="neither"):
        parse_locomo(data)


def test_each_session_becomes_one_session_completed_with_names_and_roles() -> None:
    (sample,) = parse_locomo(locomo_fixture())
    events = session_events(sample, tenant_id="locomo")
    assert [e.session_id for e in events] == ["conv-1-s1", "conv-1-s2"]
    first = events[0]
    assert first.user_id == "conv-1"
    assert first.ended_at == datetime(2023, 5, 1, 13, 0, tzinfo=UTC)
    assert [(m.role, m.name) for m in first.messages] == [("user", "Ann"), ("assistant", "Bo")]
    assert events[1].messages[0].role == "assistant"  # speaker_b is always the assistant
    # Deterministic: a re-run publishes the same event ids (JetStream drops them as duplicates).
    assert [e.event_id for e in session_events(sample, tenant_id="locomo")] == [e.event_id for e in events]


# ---- baselines --------------------------------------------------------------------------------


def test_bm25_scores_match_the_formula() -> None:
    bm25 = Bm25([["apple", "banana"], ["apple"], ["cherry", "cherry", "kiwi"]], k1=1.2, b=0.75)
    scores = bm25.scores(["cherry", "nothing"])
    assert scores[0] == scores[1] == 0.0
    idf = math.log((3 - 1 + 0.5) / (1 + 0.5) + 1)
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / 2)  # document length 3, average 2
    assert scores[2] == pytest.approx(idf * 2 * 2.2 / (2 + norm))
    # A term in fewer documents weighs more.
    assert bm25.idf("cherry") > bm25.idf("apple")
    assert ranked_indexes(bm25.scores(["apple"]), positive_only=True) == [1, 0]


def test_pooled_idf_counts_every_conversation_and_scores_only_ones_own_passages() -> None:
    # A name in every passage of its own conversation carries no evidence there; over two
    # conversations it looks as rare as a real detail, which is what the pooled baseline measures.
    own = [["caroline", "hike"], ["caroline", "paint"]]
    other = [["jon", "dance"], ["jon", "studio"], ["jon", "dance"]]
    corpora = [
        TurnCorpus(texts=[], sessions=[], bm25=Bm25([]), vectors=None, passage_tokens=tokens) for tokens in (own, other)
    ]
    pool_passage_idf(corpora)
    pooled = corpora[0].pooled_passage_bm25
    assert pooled is not None and pooled.size == 5
    alone = Bm25(own)
    assert alone.idf("caroline") == pytest.approx(math.log(0.5 / 2.5 + 1))
    assert pooled.idf("caroline") == pytest.approx(math.log(3.5 / 2.5 + 1))
    assert pooled.idf("caroline") > 4 * alone.idf("caroline")
    # Scores are of this conversation's passages only; a term only the other one has adds nothing.
    assert len(pooled.scores(["caroline", "jon"])) == 2
    assert pooled.scores(["jon"]) == [0.0, 0.0]


def test_reciprocal_rank_fusion() -> None:
    fused = reciprocal_rank_fusion([[2, 0], [0, 1, 2]], 3, k=60)
    assert fused[0] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1] == pytest.approx(1 / 62)
    assert fused[2] == pytest.approx(1 / 61 + 1 / 63)
    assert ranked_indexes(fused) == [0, 2, 1]


def test_sessions_are_ranked_by_their_best_turn() -> None:
    scores = [0.1, 0.9, 0.5, 0.5]
    sessions = [1, 1, 2, 3]
    assert sessions_by_best_turn(scores, sessions, [1, 2, 3, 4]) == [1, 2, 3, 4]  # tie 2/3 by number, 4 has none
    assert latest_sessions(
        [
            (1, datetime(2023, 1, 1, tzinfo=UTC)),
            (2, datetime(2023, 3, 1, tzinfo=UTC)),
            (3, datetime(2023, 2, 1, tzinfo=UTC)),
        ]
    ) == [2, 3, 1]
    assert unique_in_order([3, None, 3, 1, 2, 1]) == [3, 1, 2]


def test_recall_at_k_uses_the_ranking_of_the_smallest_request_that_covers_k() -> None:
    by_limit = {1: [5], 3: [2, 5, 7]}
    assert hit_at_k(by_limit, frozenset({5}), 1)
    assert not hit_at_k(by_limit, frozenset({7}), 2)  # the limit-3 ranking, cut at 2
    assert hit_at_k(by_limit, frozenset({7}), 3)
    assert hit_at_k(by_limit, frozenset({7}), 10)  # beyond every request: the largest one
    assert not hit_at_k({}, frozenset({1}), 5)


# ---- rates ------------------------------------------------------------------------------------


def result(
    category: int,
    evidence: set[int],
    ours: list[int],
    l0: list[set[int]] | None = None,
    *,
    tokens: int = 0,
    baseline: list[int] | None = None,
) -> QuestionResult:
    rankings = {OURS: {2: ours}, **{name: {9: baseline or []} for name in BASELINES}}
    return QuestionResult(
        sample_id="s",
        number=0,
        question="q",
        category=category,
        evidence_sessions=frozenset(evidence),
        rankings=rankings,
        l0_items=[InjectedItem("episode", frozenset(s), 0.5) for s in (l0 or [])],
        l0_tokens=tokens,
        l0_top_score=0.5 if l0 else None,
    )


def test_recall_table_counts_answerable_questions_with_evidence_per_category() -> None:
    results = [
        result(1, {3}, [3, 1], baseline=[1, 2, 3]),
        result(1, {4}, [1, 4], baseline=[4]),
        result(4, {2}, [5, 6], baseline=[2]),
        result(4, set(), [1], baseline=[1]),  # no evidence: not scored
        result(5, {1}, [1], baseline=[1]),  # adversarial: not scored for recall
    ]
    table = recall_table(results, [OURS, BM25], [1, 2])
    assert table[OURS]["overall"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(2 / 3)}
    assert table[OURS]["by_category"]["1"] == {"1": 0.5, "2": 1.0}
    assert table[OURS]["by_category"]["4"] == {"1": 0.0, "2": 0.0}
    assert set(table[OURS]["by_category"]) == {"1", "4"}
    assert table[BM25]["overall"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}


def test_l0_recall_contamination_and_abstention() -> None:
    answerable = [
        result(4, {1}, [], [{1}, {2}], tokens=100),  # recalled, one of two items contaminating
        result(4, {1}, [], [{3}], tokens=60),  # not recalled, one contaminating
        result(2, {1}, [], [], tokens=0),  # nothing injected
        result(2, {1}, [], [{1, 4}], tokens=40),  # a fact said in sessions 1 and 4: from an evidence session
    ]
    stats = l0_stats(answerable)
    assert stats["recall_rate"] == 0.5
    assert stats["contamination_rate"] == pytest.approx(2 / 4)
    assert stats["empty_rate"] == 0.25
    assert stats["items_mean"] == 1.0
    assert stats["tokens_mean"] == 50.0
    adversarial = [result(5, {1}, [], []), result(5, {1}, [], [{1}], tokens=80), result(5, {2}, [], [])]
    assert abstention_stats(adversarial)["abstention_rate"] == pytest.approx(2 / 3)
    assert abstention_stats(adversarial)["evidence_injected_rate"] == pytest.approx(1 / 3)
    table = l0_table([*answerable, *adversarial])
    assert table["overall"]["questions"] == 4
    assert table["adversarial"]["questions"] == 3
    assert l0_stats([])["contamination_rate"] is None


def test_l0_tradeoff_reports_each_minimum_score_it_was_asked_with() -> None:
    def swept(category: int, evidence: set[int], by_threshold: dict[float, list[set[int]]]) -> QuestionResult:
        r = result(category, evidence, [])
        r.l0_by_threshold = {
            t: [InjectedItem("episode", frozenset(s), t) for s in sessions] for t, sessions in by_threshold.items()
        }
        return r

    results = [
        swept(4, {1}, {0.3: [{2}, {1}], 0.5: [{2}]}),
        swept(4, {1}, {0.3: [{1}], 0.5: [{1}]}),
        swept(5, {1}, {0.3: [{1}], 0.5: []}),
        swept(5, {1}, {0.3: [], 0.5: []}),
    ]
    rows = {row["min_score"]: row for row in l0_tradeoff(results)}
    assert list(rows) == [0.3, 0.5]
    assert rows[0.3] == {
        "min_score": 0.3,
        "recall_rate": 1.0,
        "abstention_rate": 0.5,
        "contamination_rate": pytest.approx(1 / 3),
        "items_mean": 1.5,
    }
    assert rows[0.5]["recall_rate"] == 0.5  # only session 2 is left in the first question
    assert rows[0.5]["contamination_rate"] == 0.5
    assert rows[0.5]["abstention_rate"] == 1.0
    assert sweep_thresholds(0.3) == [0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7]


def test_comparison_and_targets() -> None:
    assert compare(0.9, 0.6) == {"ours": 0.9, "baseline": 0.6, "diff": pytest.approx(0.3), "ratio": 1.5}
    assert compare(0.5, 0.0)["ratio"] is None
    assert compare(None, 0.5)["diff"] is None
    recall = {
        OURS: {"overall": {"5": 0.92}},
        BM25: {"overall": {"5": 0.88}},
        DENSE: {"overall": {"5": 0.80}},
        PASSAGES: {"overall": {"5": 0.90}},
        DENSE_PASSAGES: {"overall": {"5": 0.89}},
    }
    l0 = {"adversarial": {"abstention_rate": 0.3}, "overall": {"recall_rate": 0.8, "contamination_rate": 0.4}}
    checks = {c["target"]: c for c in target_checks(recall, l0)}
    # Issue 50's bars: 0.93 in both forms, 0.02 above the passage hybrid, 0.03 above dense passages.
    assert not checks["L1 session recall@5 (chat form)"]["met"]
    group = {c["target"]: c for c in target_checks(recall, l0, "group")}
    assert not group["L1 session recall@5 (group form)"]["met"]
    assert checks[f"L1 recall@5 minus {PASSAGES}"]["value"] == pytest.approx(0.02)
    assert checks[f"L1 recall@5 minus {PASSAGES}"]["met"]
    assert checks[f"L1 recall@5 minus {DENSE_PASSAGES}"]["value"] == pytest.approx(0.03)
    assert checks[f"L1 recall@5 minus {DENSE_PASSAGES}"]["met"]
    worse = {c["target"]: c for c in target_checks({**recall, DENSE_PASSAGES: {"overall": {"5": 0.90}}}, l0)}
    assert not worse[f"L1 recall@5 minus {DENSE_PASSAGES}"]["met"]
    assert not checks["L0 abstention on category 5"]["met"]
    assert checks["L0 abstention on category 5"]["by"] == pytest.approx(-0.05)
    assert checks["L0 recall rate (categories 1-4)"]["met"]
    # Contamination: lower is better.
    assert not checks["L0 contamination (categories 1-4)"]["met"]
    assert checks["L0 contamination (categories 1-4)"]["by"] == pytest.approx(-0.05)


def test_the_report_is_json_and_the_chart_is_a_png(tmp_path: Path) -> None:
    results = [result(4, {1}, [1, 2], [{1}], baseline=[2, 1]), result(5, {2}, [2], [])]
    results[0].l0_by_threshold = {0.3: list(results[0].l0_items), 0.5: []}
    report = build_report(results, [1, 2], [1, 2], meta={"dataset": "fixture"})
    assert json.loads(json.dumps(report))["session_recall"][OURS]["overall"] == {"1": 1.0, "2": 1.0}
    assert report["comparison"][BM25]["1"]["diff"] == 1.0
    assert report["questions"] == {
        "total": 2,
        "scored": 1,
        "adversarial": 1,
        "answerable_without_evidence": 0,
        "by_category": {"4": 1, "5": 1},
    }
    path = draw_recall_png(report, tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_frontier_compares_the_gate_with_the_minimum_score_alone(tmp_path: Path) -> None:
    wrong = InjectedItem(kind="episode", sessions=frozenset({9}), score=0.5)
    right = InjectedItem(kind="episode", sessions=frozenset({1}), score=0.6)
    answerable = result(4, {1}, [1], [{1}])
    adversarial = result(5, {2}, [2], [])
    answerable.l0_by_threshold = {0.3: [right], 0.5: []}
    answerable.l0_ungated_by_threshold = {0.3: [right, wrong, wrong], 0.5: [right]}
    adversarial.l0_by_threshold = {0.3: [], 0.5: []}
    adversarial.l0_ungated_by_threshold = {0.3: [wrong], 0.5: []}
    report = build_report([answerable, adversarial], [1], [1], meta={"dataset": "fixture"})
    before = {row["min_score"]: row for row in report["l0_frontier"]["ungated"]}
    after = {row["min_score"]: row for row in report["l0_frontier"]["gated"]}
    assert before[0.3]["contamination_rate"] == pytest.approx(2 / 3)
    assert before[0.3]["abstention_rate"] == 0.0
    assert after[0.3] == {**after[0.3], "recall_rate": 1.0, "contamination_rate": 0.0, "abstention_rate": 1.0}
    assert draw_recall_png(report, tmp_path / "frontier.png").read_bytes()[:4] == b"\x89PNG"


# ---- scenarios --------------------------------------------------------------------------------


def test_the_korean_scenario_set_is_valid_and_has_unknowns() -> None:
    scenarios = load_scenarios(DEFAULT_SCENARIOS)
    kinds = [probe.kind for _, probe in scenarios.probes]
    assert scenarios.language == "ko"
    assert kinds.count("recall") >= 8
    assert kinds.count("unknown") >= 5
    events = scenario_events(scenarios, tenant_id="t", now=datetime(2026, 11, 1, tzinfo=UTC))
    assert len(events) == sum(len(s.sessions) for s in scenarios.scenarios)
    assert all(e.locale == "ko" for e in events)
    assert len({e.user_id for e in events}) == len(scenarios.scenarios)


def scenario_data(**probe: Any) -> dict[str, Any]:
    return {
        "scenarios": [
            {
                "id": "a",
                "user_id": "u1",
                "sessions": [{"id": "s1", "days_ago": 3, "messages": [["user", "안녕"], ["assistant", "네"]]}],
                "probes": [{"id": "p", "kind": "recall", "message": "m", "expect_sessions": ["s1"], **probe}],
            }
        ]
    }


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ({"kind": "guess"}, "kind"),
        ({"expect_sessions": ["s9"]}, "unknown sessions"),
        ({"kind": "unknown"}, "expect no session"),
        ({"expect_sessions": []}, "at least one session"),
    ],
)
def test_malformed_scenarios_are_rejected_with_the_place(probe: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioFormatError, match=message):
        parse_scenarios(scenario_data(**probe))


def outcome(
    kind: str, expected: tuple[str, ...], injected: tuple[tuple[str, ...], ...], l1: tuple[str, ...] = ()
) -> ProbeOutcome:
    return ProbeOutcome("a", "p", kind, expected, injected, l1, 0.4 if injected else None, 0)


def test_probe_outcomes_pass_by_kind_and_only_asserted_kinds_gate() -> None:
    outcomes = [
        outcome("recall", ("s1",), (("s1",), ("s2",)), ("s1",)),
        outcome("recall", ("s1",), (("s2",),)),
        outcome("unknown", (), ()),
        outcome("implicit", ("s1",), ()),
        outcome("adjacent_unknown", (), (("s1",),)),
    ]
    assert [o.passed for o in outcomes] == [True, False, True, False, False]
    summary = summarize_outcomes(outcomes)
    assert summary["by_kind"]["recall"] == {
        "probes": 2,
        "passed": 1,
        "rate": 0.5,
        "contamination_rate": pytest.approx(2 / 3),
        "l1_hit_rate": 0.5,
    }
    assert summary["asserted_failures"] == ["a/p"]
    assert not summary["all_passed"]
    assert summarize_outcomes(outcomes[2:])["all_passed"]  # measured kinds never fail the set


# ---- benchmarks -------------------------------------------------------------------------------


def test_synthetic_sessions_are_deterministic_multilingual_and_valid() -> None:
    now = datetime(2026, 11, 1, tzinfo=UTC)
    sessions = synthetic_sessions(50, users=5, turns=6, seed=3, now=now)
    again = synthetic_sessions(50, users=5, turns=6, seed=3, now=now)
    assert [s.model_dump() for s in sessions] == [s.model_dump() for s in again]
    korean = [s for s in sessions if s.locale == "ko"]
    assert 5 <= len(korean) <= 40
    assert all(any("\uac00" <= ch <= "\ud7a3" for ch in s.messages[0].content) for s in korean)
    assert {s.user_id for s in sessions} == {f"u{i}" for i in range(5)}
    assert all(len(s.messages) == 6 for s in sessions)
    with pytest.raises(ValueError, match="count"):
        synthetic_sessions(0, users=1)


def test_recall_bench_options_are_passed_to_the_script() -> None:
    argv = recall_argv(
        episodes=10,
        users=2,
        qdrant_episodes=5,
        queries=3,
        qdrant_queries=2,
        warmup=1,
        base_sentences=4,
        optimize=True,
        seed=1,
        data_dir=Path("/tmp/x"),
        keep=False,
    )
    assert "--episodes=10" in argv
    assert "--optimize" in argv
    assert "--data-dir=/tmp/x" in argv
    assert "--keep" not in argv


def test_the_recall_bench_wrapper_matches_the_script_options() -> None:
    args = parse_args(
        recall_argv(
            episodes=10,
            users=2,
            qdrant_episodes=5,
            queries=3,
            qdrant_queries=2,
            warmup=1,
            base_sentences=4,
            optimize=True,
            seed=1,
            data_dir=None,
            keep=True,
        )
    )
    assert (args.episodes, args.users, args.qdrant_episodes, args.queries) == (10, 2, 5, 3)
    assert (args.qdrant_queries, args.warmup, args.base_sentences, args.seed) == (2, 1, 4, 1)
    assert args.optimize and args.keep and args.data_dir is None


def test_group_form_sends_every_turn_as_user_with_the_speaker_in_the_text() -> None:
    (sample,) = parse_locomo(locomo_fixture())
    chat = session_events(sample, tenant_id="t")
    group = session_events(sample, tenant_id="t", form="group")
    assert [e.event_id for e in chat] == [e.event_id for e in group], "same sessions, same ids"
    chat_messages = [m for e in chat for m in e.messages]
    group_messages = [m for e in group for m in e.messages]
    assert {m.role for m in chat_messages} == {"user", "assistant"}
    assert {m.role for m in group_messages} == {"user"}
    assert all(m.name is None for m in group_messages)
    assert [m.content for m in group_messages] == [f"{m.name}: {m.content}" for m in chat_messages]
