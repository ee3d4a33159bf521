"""The L0 decision model, pure: its features, its probability and cut reasons, the shipped
coefficients, the selection it drives (the structural rules after it kept), and the lab's fit and
threshold choice."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest

from services.common.gateways.keywords import KeywordEncoder, surface_terms
from services.common.stores.episodes import Episode
from services.recall_api.l0.decision import (
    FEATURES,
    DecisionModel,
    candidate_features,
    coverage,
    feature_index,
    query_context,
    read_coefficients,
    shipped_model,
)
from services.recall_api.l0.gate import GateItem, L0GatePolicy
from services.recall_api.l0.select import L0Policy, l0_scene, select_injection
from services.recall_api.retrieval.candidates import ScoreParts
from services.recall_api.retrieval.ranking import Ranked, episode_candidate
from tiermem_lab.evaluation.l0_fit import (
    TrainTurn,
    choose_threshold,
    design_matrix,
    fit_logistic,
    group_metrics,
    standardise,
)

ENCODER = KeywordEncoder()
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def gate_item(
    relevance: float, dense: float | None = 0.8, keyword: float | None = 0.5, kind: str = "episode"
) -> GateItem:
    return GateItem(kind=kind, relevance=relevance, sessions=frozenset({"s"}), dense=dense, keyword=keyword)


def one_feature_model(name: str, weight: float, threshold: float = 0.5, intercept: float = 0.0) -> DecisionModel:
    """A model that reads one feature only (unscaled, uncentred)."""
    weights = tuple(weight if feature == name else 0.0 for feature in FEATURES)
    zeros = tuple(0.0 for _ in FEATURES)
    return DecisionModel(FEATURES, zeros, tuple(1.0 for _ in FEATURES), weights, intercept, threshold)


# ---- features ------------------------------------------------------------------------------------


def test_coverage_counts_the_querys_terms_the_text_holds_stems_included() -> None:
    query = surface_terms("which database did we pick for Atlas")
    assert coverage(query, surface_terms("We chose PostgreSQL 16 as the database for Atlas.")) == pytest.approx(2 / 3)
    assert coverage(surface_terms("painting trips"), surface_terms("she painted with friends")) == 0.5  # paint… stem
    assert coverage(frozenset(), surface_terms("anything")) == 0.0
    # Korean without analysis: two-syllable windows, so particles cost little.
    assert coverage(surface_terms("아틀라스 데이터베이스"), surface_terms("아틀라스는 데이터베이스를 정했다")) == 1.0


def test_candidate_features_read_the_turn_and_the_candidate() -> None:
    items = [gate_item(0.6, dense=0.9, keyword=0.6), gate_item(0.45, dense=0.45, keyword=0.3, kind="fact")]
    context = query_context(surface_terms("what CI are we moving to"), True, items)
    x = candidate_features(items[1], 1, context, surface_terms("moving CI to GitHub Actions"), subject_mismatch=True)
    named = dict(zip(FEATURES, x, strict=True))
    assert named["gap_to_top"] == pytest.approx(0.15)
    assert named["dense_share"] == pytest.approx(0.5)
    assert named["keyword_share"] == pytest.approx(0.5)
    assert named["rank"] == pytest.approx(math.log(2))
    assert (named["fact"], named["asks_value"], named["subject_mismatch"]) == (1.0, 1.0, 1.0)
    assert named["coverage"] == pytest.approx(1.0)  # "ci", "moving" ("what", "are", "we", "to" are stopwords)
    assert named["value_uncovered"] == pytest.approx(0.0)
    assert named["candidates"] == pytest.approx(math.log(3))


def test_an_unknown_score_part_counts_for_nothing() -> None:
    """Keyword-only answers (the embedding missed the L0 deadline) have no dense part: the model must not
    read that as "far in meaning"."""
    context = query_context(frozenset({"atlas"}), False, [gate_item(0.5, dense=None)])
    x = candidate_features(gate_item(0.5, dense=None), 0, context, frozenset({"atlas"}), subject_mismatch=False)
    assert math.isnan(x[feature_index("dense")]) and math.isnan(x[feature_index("dense_share")])
    model = one_feature_model("dense", 50.0)
    assert model.contributions(x)[feature_index("dense")] == 0.0
    assert model.probability(x) == pytest.approx(0.5)


# ---- the model -----------------------------------------------------------------------------------


def test_probability_is_the_logistic_of_the_standardised_dot_product() -> None:
    weights = tuple(1.0 if name in ("relevance", "coverage") else 0.0 for name in FEATURES)
    mean = tuple(0.5 if name == "relevance" else 0.0 for name in FEATURES)
    scale = tuple(0.1 if name == "relevance" else 1.0 for name in FEATURES)
    model = DecisionModel(FEATURES, mean, scale, weights, -1.0, 0.5)
    x = [0.0] * len(FEATURES)
    x[feature_index("relevance")], x[feature_index("coverage")] = 0.7, 0.5
    assert model.probability(x) == pytest.approx(1 / (1 + math.exp(-(-1.0 + 2.0 + 0.5))))


def test_a_cut_names_its_probability_the_bar_and_what_pulled_it_down() -> None:
    model = one_feature_model("subject_mismatch", -4.0, threshold=0.45, intercept=1.0)
    x = [0.0] * len(FEATURES)
    x[feature_index("subject_mismatch")] = 1.0
    p = model.probability(x)
    assert not model.passes(p)
    assert model.cut_reason(x, p, person="melanie") == (
        f"below the confidence bar (p={p:.2f} < 0.45): about someone other than melanie"
    )
    gap = one_feature_model("gap_to_top", -10.0, threshold=0.45)
    y = [0.0] * len(FEATURES)
    y[feature_index("gap_to_top")] = 0.2
    assert gap.cut_reason(y, gap.probability(y)).endswith(": well below the best match")


@pytest.mark.parametrize(
    ("name", "weight", "value", "said"),
    [
        # The model distrusts a keyword-led match: the best keyword match is cut for that, not for "fewer".
        ("keyword_share", -3.0, 1.0, "matched by shared words more than by meaning"),
        ("keyword_share", 3.0, 0.2, "fewer shared words than the best match"),
        # Facts weigh more: an episode is pulled down for not being one, and is not called "a fact".
        ("fact", 3.0, 0.0, "an episode, not a fact"),
        ("fact", -3.0, 1.0, "a fact"),
        ("asks_value", 3.0, 0.0, "the message asks for no single value"),
    ],
)
def test_a_cut_names_the_feature_from_the_side_it_pulled_down_from(
    name: str, weight: float, value: float, said: str
) -> None:
    """The same feature pulls a candidate down from below its mean (positive weight) or from above it
    (negative weight); the sentence must be true of the candidate either way."""
    mean = tuple(0.5 if feature == name else 0.0 for feature in FEATURES)
    single = one_feature_model(name, weight)
    model = DecisionModel(FEATURES, mean, single.scale, single.weights, 0.0, 0.5)
    x = [0.0] * len(FEATURES)
    x[feature_index(name)] = value
    p = model.probability(x)
    assert not model.passes(p)
    assert model.cut_reason(x, p) == f"below the confidence bar (p={p:.2f} < 0.50): {said}"


def test_a_cut_says_why_the_hand_rules_leave_it_out_too() -> None:
    """The rules' verdict is one input; their own sentence says more than "the hand rules leave it out"."""
    value = "knows the topic, states no clock time for it"
    only_rules = one_feature_model("rules_chosen", 4.0, threshold=0.45)
    mean = tuple(0.5 if name == "rules_chosen" else 0.0 for name in FEATURES)
    ruled = DecisionModel(FEATURES, mean, only_rules.scale, only_rules.weights, 0.0, 0.45)
    x = [0.0] * len(FEATURES)  # the rules leave it out: the only feature, and it pulls p down
    p = ruled.probability(x)
    assert ruled.cut_reason(x, p) == f"below the confidence bar (p={p:.2f} < 0.45): the hand rules leave it out"
    assert ruled.cut_reason(x, p, rules=value) == f"below the confidence bar (p={p:.2f} < 0.45): {value}"
    # Another feature weighed more: it comes first, the rules' reason after it.
    gap = one_feature_model("gap_to_top", -10.0, threshold=0.45)
    y = [0.0] * len(FEATURES)
    y[feature_index("gap_to_top")] = 0.2
    assert gap.cut_reason(y, gap.probability(y), rules=value).endswith(
        f": well below the best match; the hand rules: {value}"
    )


def test_coefficients_for_other_features_are_refused() -> None:
    data = read_coefficients()
    with pytest.raises(ValueError, match="name features"):
        DecisionModel.from_mapping({**data, "features": [*data["features"][:-1], "something_else"]})
    with pytest.raises(ValueError, match="incomplete"):
        DecisionModel.from_mapping({k: v for k, v in data.items() if k != "weights"})
    with pytest.raises(ValueError, match="threshold"):
        DecisionModel.from_mapping({**data, "threshold": 1.5})


def test_the_shipped_coefficients_load_and_say_how_they_were_made() -> None:
    data = read_coefficients()
    model = shipped_model()
    assert model.features == FEATURES == tuple(data["features"])
    assert 0 < model.threshold < 1
    assert all(math.isfinite(w) for w in model.weights)
    training = data["training"]
    assert training["command"].startswith("tiermem eval l0-train ")
    assert set(training["data"]) == {"locomo", "product-dev"}
    assert all(len(entry["sha256"]) == 64 for entry in training["data"].values())
    assert training["forms"] == ["chat", "group"]
    assert data["objective"] and data["train_metrics"]["model"] and data["train_metrics"]["rules"]


# ---- the selection it drives ---------------------------------------------------------------------


def episode(session: str, summary: str, episode_id: str | None = None) -> Episode:
    return Episode(
        episode_id=episode_id or f"00000000-0000-4000-8000-{abs(hash(session)) % 10**12:012d}",
        session_id=session,
        agent_id="agent",
        occurred_at=NOW,
        expires_at=datetime(2027, 5, 1, tzinfo=UTC),
        summary=summary,
        abstract=summary.splitlines()[0],
    )


def ranked(pairs: list[tuple[Episode, float]]) -> list[Ranked]:
    return [Ranked(episode_candidate(e, r, passage_text=e.summary), r, 0, NOW, "2026-05-01") for e, r in pairs]


def test_the_model_decides_each_candidate_and_says_why_one_is_cut() -> None:
    atlas = episode("s1", "We chose PostgreSQL 16 as the database for Atlas.")
    dog = episode("s2", "My dog Bori turned 3 last week.")
    items = ranked([(atlas, 0.6), (dog, 0.35)])
    model = one_feature_model("gap_to_top", -30.0, threshold=0.5, intercept=1.0)
    selection = select_injection(items, {}, "which database did we pick for Atlas?", ENCODER.tokens, _policy(model))
    assert [r.candidate.id for r in selection.chosen] == [atlas.episode_id]
    assert selection.dropped[dog.episode_id].startswith("below the confidence bar (p=0.")
    assert selection.dropped[dog.episode_id].endswith("< 0.50): well below the best match")
    # The rules still decide without a model: the same two, within no margin, both pass.
    rules = L0Policy(gate=L0GatePolicy(relative_margin=None), detail_max_dense=None)
    assert len(select_injection(items, {}, "which database did we pick for Atlas?", ENCODER.tokens, rules).chosen) == 2


def test_one_per_session_and_the_entry_limit_still_apply_after_the_model() -> None:
    first = episode("s1", "We chose PostgreSQL 16 as the database for Atlas.")
    same_session = episode("s1", "Atlas runs PostgreSQL 16 in production.", episode_id="e-2")
    other = episode("s3", "The Atlas backups go to S3 nightly.")
    items = ranked([(first, 0.6), (same_session, 0.59), (other, 0.58)])
    model = one_feature_model("relevance", 1.0, threshold=0.5, intercept=0.0)  # everything passes
    selection = select_injection(items, {}, "what database does Atlas use?", ENCODER.tokens, _policy(model))
    assert [r.candidate.id for r in selection.chosen] == [first.episode_id, other.episode_id]
    assert selection.dropped["e-2"] == "its session is already injected by a better item"
    limited = select_injection(items, {}, "what database does Atlas use?", ENCODER.tokens, _policy(model), limit=1)
    assert [r.candidate.id for r in limited.chosen] == [first.episode_id]


def _lines_of(memory: Episode, texts: list[str]) -> list[str]:
    return sorted(t for t in texts if t in memory.summary)


def test_the_model_tokenises_no_more_than_the_rules_do() -> None:
    """Tokenising a candidate's lines (Kiwi for Korean) is the costly part: the rules' checks do it for
    the first few items, and the model's own subject feature only when it can change the verdict; a
    model that weighs the subject cuts the memory about someone else."""
    race = episode("s1", "Caroline: I ran a charity race last Saturday.\nMelanie: That's amazing!")
    question = "What did Melanie do after the charity race?"
    tokenised: list[str] = []

    def tokens(text: str) -> list[str]:
        tokenised.append(text)
        return ENCODER.tokens(text)

    select_injection(ranked([(race, 0.6)]), {}, question, tokens, _policy(None), limit=3)
    by_rules = list(tokenised)
    tokenised.clear()
    indifferent = one_feature_model("relevance", 1.0, threshold=0.5)
    assert select_injection(ranked([(race, 0.6)]), {}, question, tokens, _policy(indifferent), limit=3).chosen
    # The candidate's own lines are what costs (the query and the speakers' names are tokenised once a turn).
    assert _lines_of(race, tokenised) == _lines_of(race, by_rules) != []
    weighs_it = one_feature_model("subject_mismatch", -10.0, threshold=0.5, intercept=1.0)
    cut = select_injection(ranked([(race, 0.6)]), {}, question, tokens, _policy(weighs_it))
    assert cut.chosen == []
    assert cut.dropped[race.episode_id].endswith("about someone other than melanie")


def test_the_scene_gives_training_the_features_inference_reads() -> None:
    atlas = episode("s1", "We chose PostgreSQL 16 as the database for Atlas.")
    items = ranked([(atlas, 0.6)])
    parts = {atlas.episode_id: ScoreParts(dense=0.85, keyword=0.4)}
    scene = l0_scene(items, parts, "which database did we pick for Atlas?", ENCODER.tokens, _policy(None), limit=3)
    x = scene.features(0, mismatch=scene.mismatch(0))
    assert x[feature_index("dense")] == 0.85 and x[feature_index("asks_value")] == 1.0
    assert x[feature_index("dense_share")] == 1.0 and x[feature_index("gap_to_top")] == 0.0


def _policy(model: DecisionModel | None) -> L0Policy:
    return L0Policy(gate=L0GatePolicy(relative_margin=0.03), model=model)


# ---- the lab's fit ---------------------------------------------------------------------------------


def test_standardise_centres_known_values_and_zeroes_unknown_ones() -> None:
    z, mean, scale = standardise(np.array([[1.0, np.nan], [3.0, 2.0], [5.0, 4.0]]))
    assert mean.tolist() == [3.0, 3.0]
    assert z[0, 1] == 0.0 and z[1, 0] == 0.0
    assert scale[0] == pytest.approx(math.sqrt(8 / 3))


def _picks(features: tuple[tuple[float, ...], ...]) -> Callable[[DecisionModel | None], list[int]]:
    """A toy turn's L0: every candidate past the model's bar (None, the rules here: nothing)."""

    def choose(model: DecisionModel | None) -> list[int]:
        if model is None:
            return []
        return [i for i, x in enumerate(features) if model.passes(model.probability(x))]

    return choose


def test_the_fit_finds_the_signal_and_the_threshold_maximises_the_objective() -> None:
    rng = np.random.default_rng(7)
    signal = feature_index("coverage")
    turns: list[TrainTurn] = []
    for n in range(200):
        answerable = n % 4 != 0
        rows: list[tuple[float, ...]] = []
        labels: list[int] = []
        for rank in range(3):
            good = answerable and rank == 0
            x = rng.normal(0.0, 1.0, len(FEATURES))
            x[signal] = (0.8 if good else 0.2) + rng.normal(0.0, 0.1)
            rows.append(tuple(float(v) for v in x))
            labels.append(int(good))
        features = tuple(rows)
        turns.append(
            TrainTurn(
                "toy",
                answerable,
                tuple(labels),
                features,
                _picks(features),
            )
        )
    x, y = design_matrix(turns)
    fitted = fit_logistic(x, y, l2=1.0)
    assert max(range(len(FEATURES)), key=lambda i: abs(fitted.weights[i])) == signal
    assert fitted.weights[signal] > 0
    choice = choose_threshold(turns, fitted)
    toy = choice.metrics["toy"]
    assert toy["recall"] > 0.95 and toy["contamination"] <= 0.35 and toy["abstention"] >= 0.35
    # The chosen point has the best recall of the curve's points within the bars (one group: its mean is it).
    assert choice.met_bars
    within = [p["recall"] for p in choice.curve if p["contamination"] <= 0.35 and p["abstention"] >= 0.35]
    assert choice.objective == pytest.approx(max(within), abs=1e-3)
    # The rules' answer (None) is scored by the same measures: nothing injected, nothing recalled.
    nothing = group_metrics(turns, [turn.choose(None) for turn in turns])["toy"]
    assert (nothing["recall"], nothing["abstention"]) == (0.0, 1.0)
