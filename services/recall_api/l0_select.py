"""What L0 injects, pure: the ranked candidates through the gate (`l0_gate`: agreement, distance from
the top, one item per session, facts first), the subject check (`l0_subject`: nothing about someone
else), the detail check (`l0_detail`: nothing that knows the topic but not the asked detail) and the
redundancy check (nothing that repeats an item already chosen). The one place `AutoRecall` and the
memory browser's L0 explanation decide it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.recall_api.candidates import ScoreParts
from services.recall_api.l0_detail import DetailCheck, detail_check, misses_the_detail
from services.recall_api.l0_gate import GateItem, L0GatePolicy, gate
from services.recall_api.l0_subject import about_someone_else, known_speakers, subject_check
from services.recall_api.ranking import Candidate, Ranked

Tokenise = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class L0Policy:
    """The gate's policy and whether the subject check runs."""

    gate: L0GatePolicy
    subject_attribution: bool = True
    detail_max_dense: float | None = 0.2  # the detail check's "close in meaning" bar (None: check off)
    # An item whose keyword terms are at least this share of another chosen item's (or the other way
    # round) repeats it and is left out (None: off).
    max_overlap: float | None = 0.8


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


def stands_alone(candidate: Candidate) -> bool:
    """Episodes, confirmed facts and facts saved on purpose stand on their own; a tentative fact read
    once from a conversation needs its session's episode beside it (see `l0_gate`)."""
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
) -> Selection:
    """The items of `ranked` (best first, past the minimum score) to inject, in order."""
    kept = [ranked[i] for i in gate([_gate_item(r, parts) for r in ranked], policy.gate)]
    kept_ids = {r.candidate.id for r in kept}
    gated = "gated (far from the top, no agreement, or its session already injected)"
    dropped = {r.candidate.id: gated for r in ranked if r.candidate.id not in kept_ids}
    if not kept:
        return Selection(kept, dropped)
    speakers = known_speakers(evidence_text(r.candidate) for r in ranked)
    if policy.subject_attribution:
        kept = _subject_attributed(kept, query, speakers, tokenise, dropped)
    if policy.detail_max_dense is not None and kept:
        entities = speakers | {name for r in ranked if r.candidate.episode for name in r.candidate.episode.entity_names}
        kept = _detail_covered(kept, parts, detail_check(query, entities, tokenise), tokenise, policy, dropped)
    if policy.max_overlap is not None:
        kept = _distinct(kept, tokenise, policy.max_overlap, dropped)
    return Selection(kept, dropped)


def term_overlap(first: set[str], second: set[str]) -> float:
    """The share of the smaller term set that the other one holds too (1.0: one says nothing new)."""
    if not first or not second:
        return 0.0
    return len(first & second) / min(len(first), len(second))


def _distinct(kept: list[Ranked], tokenise: Tokenise, max_overlap: float, dropped: dict[str, str]) -> list[Ranked]:
    """Why: a user who says the same thing in many sessions (a weekly stand-up, a repeated preference)
    has many memories that each pass the gate; one per session would inject all of them, so the tokens
    per turn would grow with the memory's size while the answer gets nothing new. The better-ranked
    one is kept."""
    chosen: list[tuple[Ranked, set[str]]] = []
    for item in kept:
        terms = {t for t in tokenise(evidence_text(item.candidate)) if not t.startswith("#")}
        repeated = next((c for c, other in chosen if term_overlap(terms, other) >= max_overlap), None)
        if repeated is not None:
            dropped[item.candidate.id] = f"repeats {repeated.candidate.id}"
        else:
            chosen.append((item, terms))
    return [item for item, _ in chosen]


def _subject_attributed(
    kept: list[Ranked], query: str, speakers: set[str], tokenise: Tokenise, dropped: dict[str, str]
) -> list[Ranked]:
    check = subject_check(query, speakers, tokenise)
    if check is None:
        return kept
    chosen: list[Ranked] = []
    for item in kept:
        candidate = item.candidate
        subject = candidate.fact.subject if candidate.fact is not None else None
        if about_someone_else(check, evidence_text(candidate), tokenise, subject=subject):
            dropped[candidate.id] = f"about someone other than {check.person}"
        else:
            chosen.append(item)
    return chosen


def _detail_covered(
    kept: list[Ranked],
    parts: Mapping[str, ScoreParts],
    check: DetailCheck | None,
    tokenise: Tokenise,
    policy: L0Policy,
    dropped: dict[str, str],
) -> list[Ranked]:
    if check is None or policy.detail_max_dense is None:
        return kept
    chosen: list[Ranked] = []
    for item in kept:
        candidate = item.candidate
        part = parts.get(candidate.id)
        text = evidence_text(candidate)
        if misses_the_detail(check, text, tokenise, part.dense if part else None, policy.detail_max_dense):
            dropped[candidate.id] = "knows the topic, not the detail asked ({})".format(
                ", ".join(sorted(check.details))
            )
        else:
            chosen.append(item)
    return chosen
