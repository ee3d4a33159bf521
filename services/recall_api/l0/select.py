"""What L0 injects, pure. With a decision model (`decision`, the default): each ranked candidate
passes when the model's p reaches its bar, then the structural rules of the gate (one item per
session, facts first, a tentative fact only with its session), the value check (nothing silent on the
number, time or date asked) and the redundancy check (nothing that repeats an item already chosen);
the hand rules' verdict is one of the model's inputs. Without one (`TIERMEM_L0_DECISION=rules`): the
gate's hand rules (agreement, distance from the top), the subject check (`subject`: nothing about
someone else) and the detail check (`detail`: nothing that knows the topic but not the asked detail).
The one place `AutoRecall` and the memory browser's L0 explanation decide it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from services.common.gateways.keywords import surface_terms
from services.recall_api.l0.answer_value import AskedValue, asked_value, states_no_value
from services.recall_api.l0.decision import DecisionModel, QueryContext, candidate_features, query_context
from services.recall_api.l0.detail import DetailCheck, asks_for_value, detail_check, misses_the_detail
from services.recall_api.l0.gate import GateItem, L0GatePolicy, gate
from services.recall_api.l0.subject import SubjectCheck, about_someone_else, known_speakers, subject_check
from services.recall_api.retrieval.candidates import ScoreParts
from services.recall_api.retrieval.ranking import Candidate, Ranked

Tokenise = Callable[[str], list[str]]

GATED = "gated (far from the top, no agreement, or its session already injected)"


@dataclass(frozen=True, slots=True)
class L0Policy:
    """The gate's policy and whether the subject check runs."""

    gate: L0GatePolicy
    subject_attribution: bool = True
    detail_max_dense: float | None = 0.2  # the detail check's "close in meaning" bar (None: check off)
    # Leave out a memory that states no value of the kind the question asks for (answer_value.py).
    value_check: bool = True
    # An item whose keyword terms are at least this share of another chosen item's (or the other way
    # round) repeats it and is left out (None: off).
    max_overlap: float | None = 0.8
    # The calibrated decision (decision.py) in place of the gate's agreement and margin rules and the
    # subject and detail checks (None: those rules decide).
    model: DecisionModel | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """The ranked items to inject, in order, and why each other one was left out (by candidate id)."""

    chosen: list[Ranked]
    dropped: dict[str, str]


def candidate_sessions(candidate: Candidate) -> frozenset[str]:
    """The sessions a memory was stated in: an episode's own, every session of a fact's provenance."""
    if candidate.episode is not None:
        return frozenset({candidate.episode.session_id})
    if candidate.fact is not None:
        return frozenset(p.session_id for p in candidate.fact.provenance if p.session_id)
    return frozenset()


def evidence_text(candidate: Candidate) -> str:
    """The text a candidate matched with: its passage, else the episode's summary, else the fact."""
    if candidate.matched_text:
        return candidate.matched_text
    if candidate.episode is not None:
        return candidate.episode.summary
    return candidate.fact.text if candidate.fact is not None else ""


def stated_text(candidate: Candidate) -> str:
    """What a memory states near the query: an episode's summary and its passages the search reached
    (the value asked for may sit in a passage other than the best one; the best one is among them),
    else the fact."""
    if candidate.episode is not None:
        return "\n".join((candidate.episode.summary, *candidate.reached_passages))
    return evidence_text(candidate)


def stands_alone(candidate: Candidate) -> bool:
    """Episodes, confirmed facts and facts saved on purpose stand on their own; a tentative fact read
    once from a conversation needs its session's episode beside it (see `gate`)."""
    fact = candidate.fact
    if candidate.kind != "fact" or fact is None:
        return True
    return fact.status == "confirmed" or any(p.source == "api" for p in fact.provenance)


def _gate_item(ranked: Ranked, parts: Mapping[str, ScoreParts]) -> GateItem:
    candidate = ranked.candidate
    part = parts.get(candidate.id)
    return GateItem(
        kind=candidate.kind,
        relevance=candidate.relevance,
        sessions=candidate_sessions(candidate),
        dense=part.dense if part else None,
        keyword=part.keyword if part else None,
        standalone=stands_alone(candidate),
    )


def select_injection(
    ranked: Sequence[Ranked],
    parts: Mapping[str, ScoreParts],
    query: str,
    tokenise: Callable[[str], list[str]],
    policy: L0Policy,
    *,
    limit: int | None = None,
) -> Selection:
    """The items of `ranked` (best first, past the minimum score) to inject, in order: at most `limit`
    (None: every item that passes). The checks after the gate run best first and stop at `limit`:
    the subject and detail checks tokenise the item's text (Kiwi, ~0.25 ms per Korean text) when the
    query names someone or asks for a detail, and a turn injects only the first few, so items past them
    are never checked (the memory browser says they ranked below the cut)."""
    if policy.model is not None:
        return _select_by_model(ranked, parts, query, tokenise, policy, policy.model, limit)
    kept = [ranked[i] for i in gate([_gate_item(r, parts) for r in ranked], policy.gate)]
    kept_ids = {r.candidate.id for r in kept}
    dropped = {r.candidate.id: GATED for r in ranked if r.candidate.id not in kept_ids}
    if not kept:
        return Selection(kept, dropped)
    speakers = known_speakers(evidence_text(r.candidate) for r in ranked)
    detail = None
    if policy.detail_max_dense is not None:
        entities = speakers | {name for r in ranked if r.candidate.episode for name in r.candidate.episode.entity_names}
        detail = detail_check(query, entities, tokenise)
    checks = _Checks(
        subject=subject_check(query, speakers, tokenise) if policy.subject_attribution else None,
        detail=detail,
        value=asked_value(query) if policy.value_check else None,
        tokenise=tokenise,
        policy=policy,
    )
    return _choose(kept, dropped, checks, parts, limit)


def _choose(
    kept: Sequence[Ranked], dropped: dict[str, str], checks: _Checks, parts: Mapping[str, ScoreParts], limit: int | None
) -> Selection:
    """The first `limit` of `kept` that pass the checks, best first; why each other one is left out
    goes into `dropped`."""
    chosen: list[tuple[Ranked, frozenset[str]]] = []
    for item in kept:
        if limit is not None and len(chosen) >= limit:
            break
        terms = surface_terms(evidence_text(item.candidate))
        reason = checks.left_out_because(item, parts) or checks.repeats(terms, chosen)
        if reason is not None:
            dropped[item.candidate.id] = reason
        else:
            chosen.append((item, terms))
    return Selection([item for item, _ in chosen], dropped)


@dataclass(frozen=True, slots=True)
class Scene:
    """One turn as the decision model sees it: the ranked candidates (past the floor), their gate
    items and evidence texts, the turn's context and, when the message names one known speaker, the
    subject check."""

    ranked: Sequence[Ranked]
    items: list[GateItem]
    texts: list[str]
    context: QueryContext
    subject: SubjectCheck | None
    tokenise: Tokenise
    rules_chosen: frozenset[str] = frozenset()  # ids the hand rules inject (their verdict is one feature)
    rules_dropped: Mapping[str, str] = field(default_factory=dict)  # id → why the hand rules leave it out

    def mismatch(self, index: int) -> bool:
        """The candidate's evidence is another known speaker's (tokenises its text: Kiwi for Korean)."""
        if self.subject is None:
            return False
        candidate = self.ranked[index].candidate
        subject = candidate.fact.subject if candidate.fact is not None else None
        return about_someone_else(self.subject, self.texts[index], self.tokenise, subject=subject)

    def features(self, index: int, *, mismatch: bool) -> tuple[float, ...]:
        terms = surface_terms(self.texts[index])
        chosen = self.ranked[index].candidate.id in self.rules_chosen
        return candidate_features(
            self.items[index], index, self.context, terms, subject_mismatch=mismatch, rules_chosen=chosen
        )


def l0_scene(
    ranked: Sequence[Ranked],
    parts: Mapping[str, ScoreParts],
    query: str,
    tokenise: Tokenise,
    rules: L0Policy,
    *,
    limit: int | None = None,
) -> Scene:
    """The turn's `Scene` (the lab's training reads the same features as inference). `rules`: the hand
    rules' policy, whose choice (within `limit`) is one feature: the model weighs their verdict with
    the signals they cut on alone."""
    items = [_gate_item(r, parts) for r in ranked]
    texts = [evidence_text(r.candidate) for r in ranked]
    subject = subject_check(query, known_speakers(texts), tokenise) if rules.subject_attribution and ranked else None
    context = query_context(surface_terms(query), asks_for_value(query), items)
    by_rules = select_injection(ranked, parts, query, tokenise, replace(rules, model=None), limit=limit)
    chosen = frozenset(r.candidate.id for r in by_rules.chosen)
    return Scene(ranked, items, texts, context, subject, tokenise, chosen, by_rules.dropped)


def _model_verdict(scene: Scene, index: int, model: DecisionModel) -> str | None:
    """None when the candidate passes the model's bar, else why not. The subject check (Kiwi for a
    Korean text) runs only when its answer can change the verdict (otherwise the reason's p is the one
    without it)."""
    mismatch = False
    if scene.subject is not None:
        as_theirs = model.passes(model.probability(scene.features(index, mismatch=False)))
        as_other = model.passes(model.probability(scene.features(index, mismatch=True)))
        mismatch = as_theirs != as_other and scene.mismatch(index)
    x = scene.features(index, mismatch=mismatch)
    p = model.probability(x)
    if model.passes(p):
        return None
    # The gate's sentence names three causes without saying which: the model's own feature says more.
    rules = scene.rules_dropped.get(scene.ranked[index].candidate.id)
    person = scene.subject.person if scene.subject is not None else None
    return model.cut_reason(x, p, person=person, rules=rules if rules != GATED else None)


def _select_by_model(
    ranked: Sequence[Ranked],
    parts: Mapping[str, ScoreParts],
    query: str,
    tokenise: Tokenise,
    policy: L0Policy,
    model: DecisionModel,
    limit: int | None,
) -> Selection:
    """The model decides each candidate; one per session, facts first, tentative facts only with their
    session and the redundancy check keep their rules."""
    if not ranked:
        return Selection([], {})
    scene = l0_scene(ranked, parts, query, tokenise, policy, limit=limit)
    dropped: dict[str, str] = {}
    accepted: list[int] = []
    for index, item in enumerate(ranked):
        reason = _model_verdict(scene, index, model)
        if reason is None:
            accepted.append(index)
        else:
            dropped[item.candidate.id] = reason
    structural = L0GatePolicy(
        relative_margin=None, one_per_session=policy.gate.one_per_session, fact_margin=policy.gate.fact_margin
    )
    order = gate([scene.items[i] for i in accepted], structural)
    kept = [ranked[accepted[position]] for position in order]
    kept_ids = {r.candidate.id for r in kept}
    for index in accepted:
        candidate = ranked[index].candidate
        if candidate.id not in kept_ids:
            dropped[candidate.id] = (
                "its session is already injected by a better item"
                if scene.items[index].standalone
                else "a tentative fact whose session's episode is not injected"
            )
    value = asked_value(query) if policy.value_check else None
    checks = _Checks(subject=None, detail=None, value=value, tokenise=tokenise, policy=policy)
    return _choose(kept, dropped, checks, parts, limit)


def term_overlap(first: Set[str], second: Set[str]) -> float:
    """The share of the smaller term set that the other one holds too (1.0: one says nothing new)."""
    if not first or not second:
        return 0.0
    return len(first & second) / min(len(first), len(second))


@dataclass(frozen=True, slots=True)
class _Checks:
    """The checks an item that passed the gate goes through, in order: the subject check, the detail
    check, the value check, then the redundancy check against the items already chosen."""

    subject: SubjectCheck | None
    detail: DetailCheck | None
    value: AskedValue | None
    tokenise: Tokenise
    policy: L0Policy

    def left_out_because(self, item: Ranked, parts: Mapping[str, ScoreParts]) -> str | None:
        """Why the subject or detail check leaves `item` out (None: it passes both)."""
        candidate = item.candidate
        text = evidence_text(candidate)
        subject = candidate.fact.subject if candidate.fact is not None else None
        if self.subject is not None and about_someone_else(self.subject, text, self.tokenise, subject=subject):
            return f"about someone other than {self.subject.person}"
        part = parts.get(candidate.id)
        if self.value is not None:
            # A typed question's detail is its value, whatever words say it: the value check decides.
            return (
                f"knows the topic, states no {self.value.kind} for it"
                if states_no_value(self.value, stated_text(candidate))
                else None
            )
        max_dense = self.policy.detail_max_dense
        if (
            self.detail is not None
            and max_dense is not None
            and misses_the_detail(self.detail, text, self.tokenise, part.dense if part else None, max_dense)
        ):
            return "knows the topic, not the detail asked ({})".format(", ".join(sorted(self.detail.details)))
        return None

    def repeats(self, terms: frozenset[str], chosen: Sequence[tuple[Ranked, frozenset[str]]]) -> str | None:
        """Why an item with these `terms` (`surface_terms` of its text) is left out as repeating one
        already chosen (None: it says something new). Why: a user who says the same thing in many
        sessions (a weekly stand-up, a repeated preference) has many memories that each pass the gate;
        one per session would inject all of them, so the tokens per turn would grow with the memory's
        size while the answer gets nothing new. The better-ranked one is kept. Wording, not meaning, is
        compared, so no morphological analysis: the checks above it analyse an item only when the
        query names someone or asks for a detail."""
        if self.policy.max_overlap is None:
            return None
        repeated = next((c for c, other in chosen if term_overlap(terms, other) >= self.policy.max_overlap), None)
        return f"repeats {repeated.candidate.id}" if repeated is not None else None
