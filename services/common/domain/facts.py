"""The one write policy for facts (DESIGN.md §4), shared by semantic extraction and the explicit
`memory_save` API.

Everything here is pure: `plan_fact_write` takes a candidate and the facts already stored for the
same owner, scope, subject and attribute, and returns the full `Fact` objects to upsert. The caller
only writes them.

Model of time. A fact is identified by (tenant, user, scope, subject, attribute, value), so its id
is deterministic (uuid5) and "moving back" to an earlier value reactivates the earlier fact instead
of creating a clone. Each fact keeps the observations (`provenance`) that asserted it. For a
single-valued attribute the current value, the validity periods and the supersession links are
recomputed from *all* observations of the attribute, ordered by when they happened
(`occurred_at`), never by when they were delivered. Consequences:

- replaying a candidate changes nothing (its observation is already in the set), so the plan is empty;
- delivery order does not matter: any order of the same candidates converges on the same facts, and
  an old candidate delivered late becomes a superseded historical version instead of overwriting
  the newer value;
- nothing is ever deleted: a superseded fact keeps its provenance, and gets `valid_to` (when the
  next value was first observed), `superseded_by` and `status="superseded"`.

When a value is reactivated, `valid_from`/`valid_to` describe its latest period only; earlier
periods remain readable from its provenance and from the facts that superseded it. Its evidence
count includes the earlier observations, so a value stated twice over the years comes back
`confirmed`. The text, language and volatility are those of the latest observation.
"""

from __future__ import annotations

import math
import re
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from contracts.events import CleanText, Scope, SubjectToken
from services.common.domain.fact_attributes import ATTRIBUTE_ALIASES as ATTRIBUTE_ALIASES
from services.common.domain.fact_attributes import ATTRIBUTE_REGISTRY as ATTRIBUTE_REGISTRY
from services.common.domain.fact_attributes import AttributeSpec as AttributeSpec
from services.common.domain.fact_attributes import Volatility as Volatility
from services.common.domain.fact_attributes import attribute_spec as attribute_spec
from services.common.domain.fact_attributes import normalise_attribute as normalise_attribute
from services.common.domain.importance import API_SAVE_FLOOR, DEFAULT_IMPORTANCE, text_importance
from services.common.domain.sentences import split_sentences

FactStatus = Literal["tentative", "confirmed", "superseded"]
FactSource = Literal["extraction", "api"]
FactWriteOutcome = Literal["created", "reinforced", "superseding", "reactivated", "historical", "duplicate", "rejected"]

USER_SUBJECT = "user"
"""Canonical subject of facts about the memory's owner."""

_HALF_LIFE_DAYS: dict[str, float] = {"high": 30.0, "medium": 180.0, "low": 3650.0}

# Fixed namespace so fact ids are stable across processes, versions and machines.
FACT_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:tiermem:fact")


# --------------------------------------------------------------------------------------------------
# Decay


def half_life_days(volatility: Volatility) -> float:
    """Recall decay half-life: tools in use fade fast, preferences slowly, names almost never."""
    return _HALF_LIFE_DAYS[volatility]


def decay(age_days: float, volatility: Volatility) -> float:
    """Weight in (0, 1] of a fact last confirmed `age_days` ago (exponential, by half-life).
    Negative ages (clock skew) count as zero."""
    if math.isnan(age_days):
        raise ValueError("age_days must be a number, got NaN")
    return float(0.5 ** (max(age_days, 0.0) / half_life_days(volatility)))


# --------------------------------------------------------------------------------------------------
# Normalisation and ids

_USER_SUBJECT_ALIASES = frozenset(
    {"user", "the user", "me", "i", "myself", "self", "나", "저", "내", "제", "사용자", "유저", "본인"}
)
_EDGE_PUNCTUATION = " \t\r\n\"'`“”‘’«»「」『』()[]{}<>.,;:!?。、，！？…"


def normalise_text_key(text: str) -> str:
    """Comparison key for subjects and values: NFKC, casefold, collapsed whitespace, no surrounding
    quotes or punctuation. Keeps inner punctuation ("C++", "Node.js" stay distinct from "C", "Nodejs")."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = re.sub(r"\s+", " ", folded)
    return folded.strip(_EDGE_PUNCTUATION)


def normalise_subject(subject: str) -> str:
    """Map "User", "the user", "나", "me" to "user"; anything else to its text key."""
    key = normalise_text_key(subject)
    return USER_SUBJECT if key in _USER_SUBJECT_ALIASES else key


def make_fact_id(tenant_id: str, user_id: str, scope: str, subject: str, attribute: str, value: str) -> str:
    """Deterministic fact id (UUID text): the same statement about the same subject, for the same
    owner and scope, always maps to the same point."""
    key = "\x1f".join(
        (
            tenant_id,
            user_id,
            scope,
            normalise_subject(subject),
            normalise_attribute(attribute),
            normalise_text_key(value),
        )
    )
    return str(uuid.uuid5(FACT_ID_NAMESPACE, key))


# --------------------------------------------------------------------------------------------------
# Models


class FactProvenance(BaseModel):
    """One observation of a fact: which episode (or API request) asserted it, and when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    episode_id: str = Field(
        min_length=1, description="Episode the fact was extracted from; for API saves, the save request's id."
    )
    session_id: str | None = Field(default=None, description="Source session, when known.")
    occurred_at: AwareDatetime = Field(description="When the statement was made (the session's end time).")
    source: FactSource = Field(description="'extraction' (from an episode) or 'api' (explicit memory_save).")
    user_correction: bool = Field(
        default=False,
        description="The user stated this value as a correction of what was remembered, in their own words in a "
        "session or through the correction API: their own word needs no second observation.",
    )
    metadata: dict[str, str] = Field(
        default_factory=dict, description="The source session's metadata (extraction); empty for API saves."
    )

    @property
    def key(self) -> tuple[str, str]:
        """Identity of the observation: the same episode asserting the same fact twice is one observation."""
        return (self.source, self.episode_id)


class Fact(BaseModel):
    """One fact = one sentence + structure (DESIGN.md §4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fact_id: str = Field(description="uuid5 of tenant, user, scope, subject, attribute and value (see make_fact_id).")
    tenant_id: SubjectToken
    user_id: SubjectToken
    scope: Scope
    subject: str = Field(min_length=1, description="'user' or an entity name such as 'Caroline'.")
    attribute: str = Field(min_length=1, description="Normalised snake_case attribute, e.g. 'lives_in'.")
    value: str = Field(min_length=1)
    text: CleanText = Field(min_length=1, description="The fact as one sentence, in the session's language.")
    language: str = Field(min_length=1)
    volatility: Volatility
    status: FactStatus
    evidence_count: int = Field(ge=1, description="Number of distinct observations (== len(provenance)).")
    single_valued: bool
    valid_from: AwareDatetime = Field(description="Start of the fact's latest validity period.")
    valid_to: AwareDatetime | None = Field(default=None, description="Set when a newer value superseded it.")
    superseded_by: str | None = Field(default=None, description="fact_id of the value that superseded it.")
    provenance: list[FactProvenance] = Field(min_length=1, description="Observations, oldest first.")
    created_at: AwareDatetime
    updated_at: AwareDatetime
    importance: float = Field(
        default=DEFAULT_IMPORTANCE,
        ge=0.0,
        le=1.0,
        description="How much the fact matters (domain/importance.py): the highest of its observations; "
        "facts stored before importance existed read 0.5.",
    )

    @property
    def metadata_values(self) -> dict[str, list[str]]:
        """Session metadata key → every value its observations' sessions gave it, sorted: stored on the
        point, where a filter on one value matches when any of its sessions carried it."""
        values: dict[str, set[str]] = {}
        for observation in self.provenance:
            for key, value in observation.metadata.items():
                values.setdefault(key, set()).add(value)
        return {key: sorted(found) for key, found in sorted(values.items())}

    @property
    def is_current(self) -> bool:
        return self.valid_to is None and self.status != "superseded"


class FactCandidate(BaseModel):
    """A fact proposed by extraction or the API, before the write policy decided what to store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: SubjectToken
    user_id: SubjectToken
    scope: Scope
    subject: CleanText
    attribute: CleanText
    value: CleanText
    text: CleanText
    language: str
    volatility: Volatility | None = Field(default=None, description="None: the attribute's default volatility.")
    provenance: FactProvenance
    importance: float | None = Field(
        default=None, ge=0.0, le=1.0, description="From the extraction model; None: scored from the text."
    )

    def scored_importance(self) -> float:
        """The candidate's importance: the model's when given, else the offline heuristic on its sentence.
        An explicit save through the API is never below `API_SAVE_FLOOR` (saving is a "remember this")."""
        score = self.importance if self.importance is not None else text_importance(self.text)
        return max(score, API_SAVE_FLOOR) if self.provenance.source == "api" else score

    @field_validator("language")
    @classmethod
    def _language_tag(cls, value: str) -> str:
        tag = value.strip()
        if not tag:
            raise ValueError("language must not be empty")
        return tag


class FactWritePlan(BaseModel):
    """What to write for one candidate. `upserts` are complete facts; the caller stores them as-is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: FactWriteOutcome
    fact_id: str | None = Field(description="The fact the candidate maps to; None when rejected.")
    upserts: list[Fact] = Field(default_factory=list)
    rejected_reason: str | None = None

    @property
    def is_noop(self) -> bool:
        return not self.upserts


# --------------------------------------------------------------------------------------------------
# Candidate checks (heuristic, deterministic)

_TRANSIENT_STATE_EN = re.compile(
    r"\b(hungry|starving|thirsty|sleepy|tired|exhausted|bored|hungover|jet[- ]?lagged|sick|stuck in traffic|"
    r"running late|on my way|in a meeting)\b(?!\s+of\b)",
    re.IGNORECASE,
)
_MOMENTARY_EN = re.compile(
    r"\b(right now|at the moment|just now|today|tonight|this (?:morning|afternoon|evening))\b", re.IGNORECASE
)
_TRANSIENT_STATE_KO = re.compile(r"배고프|배고파|배가 고파|피곤|졸려|졸리|목말라|목이 말라|심심|지루해|숙취|배불러")
_MOMENTARY_KO = re.compile(r"지금|오늘|방금|이따가")


def check_fact_candidate(candidate: FactCandidate) -> str | None:
    """Why the candidate may not be stored, or None when it passes the write policy:
    non-empty structure, exactly one sentence, and durable (not a passing state)."""
    for field_name in ("subject", "attribute", "value", "text"):
        if not getattr(candidate, field_name).strip():
            return f"empty {field_name}"
    if not normalise_attribute(candidate.attribute):
        return "attribute has no letters or digits"
    sentences = split_sentences(candidate.text)
    if len(sentences) != 1:
        return f"text has {len(sentences)} sentences; one fact is one sentence (store each as its own fact)"
    return transient_reason(candidate.text, attribute=candidate.attribute)


def transient_reason(text: str, *, attribute: str | None = None) -> str | None:
    """Why `text` describes a passing state rather than a durable fact, or None.

    A passing state ("hungry", "피곤해") is always rejected. A momentary time expression ("right now",
    "오늘") is rejected for multi-valued attributes ("using Vim today") but accepted for single-valued
    ones, where it dates a lasting change ("moved to Busan today")."""
    for pattern in (_TRANSIENT_STATE_EN, _TRANSIENT_STATE_KO):
        match = pattern.search(text)
        if match:
            return f"transient state ({match.group(0)!r}): not true next time"
    if attribute is not None and attribute_spec(attribute).single_valued:
        return None
    for pattern in (_MOMENTARY_EN, _MOMENTARY_KO):
        match = pattern.search(text)
        if match:
            return f"momentary ({match.group(0)!r}): only true at the time it was said"
    return None


# --------------------------------------------------------------------------------------------------
# Planning


def plan_fact_write(
    candidate: FactCandidate,
    existing: Sequence[Fact],
    *,
    now: datetime,
    confirm_threshold: int = 2,
) -> FactWritePlan:
    """Decide what to store for `candidate`, given the facts already stored for the same owner and
    subject (more may be passed: facts of other scopes, subjects or attributes are ignored; facts of
    another owner are a caller bug and raise ValueError).

    - same value already stored: one more observation (idempotent per episode); `confirmed` once
      `evidence_count >= confirm_threshold`, or at once when an observation is the user's correction;
    - single-valued attribute, different value: the value observed last (by `occurred_at`) is
      current and `tentative` until confirmed; every earlier value gets `valid_to`, `superseded_by`
      and `status="superseded"`. A late-delivered older observation never supersedes a newer value;
    - multi-valued attribute: values accumulate.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if confirm_threshold < 1:
        raise ValueError(f"confirm_threshold must be at least 1, got {confirm_threshold}")
    reason = check_fact_candidate(candidate)
    if reason is not None:
        return FactWritePlan(outcome="rejected", fact_id=None, rejected_reason=reason)

    spec = attribute_spec(candidate.attribute)
    subject_key = normalise_subject(candidate.subject)
    group = _same_group(candidate, existing, subject_key=subject_key, attribute=spec.name)
    fact_id = make_fact_id(
        candidate.tenant_id, candidate.user_id, candidate.scope, candidate.subject, spec.name, candidate.value
    )
    before = {fact.fact_id: fact for fact in group}
    target_before = before.get(fact_id)
    duplicate = target_before is not None and any(
        observation.key == candidate.provenance.key for observation in target_before.provenance
    )
    if target_before is not None and duplicate:
        observed = target_before
    else:
        observed = _observe(candidate, target_before, spec=spec, subject_key=subject_key, fact_id=fact_id, now=now)

    after_by_id = dict(before)
    after_by_id[fact_id] = observed
    if spec.single_valued:
        resolved = _resolve_timeline(list(after_by_id.values()), confirm_threshold=confirm_threshold)
    else:
        resolved = {fact_id: _resolve_independent(observed, confirm_threshold=confirm_threshold)}

    upserts = [
        _stamp(fact, now) for fid, fact in sorted(resolved.items()) if fid not in before or _differs(before[fid], fact)
    ]
    outcome: FactWriteOutcome = (
        "duplicate" if duplicate else _outcome(target_before, resolved[fact_id], before, resolved)
    )
    return FactWritePlan(outcome=outcome, fact_id=fact_id, upserts=upserts)


def _same_group(candidate: FactCandidate, existing: Sequence[Fact], *, subject_key: str, attribute: str) -> list[Fact]:
    group: dict[str, Fact] = {}
    for fact in existing:
        if fact.tenant_id != candidate.tenant_id or fact.user_id != candidate.user_id:
            raise ValueError(
                f"fact {fact.fact_id} belongs to {fact.tenant_id}/{fact.user_id}, "
                f"not to the candidate's owner {candidate.tenant_id}/{candidate.user_id}"
            )
        if (
            fact.scope != candidate.scope
            or normalise_subject(fact.subject) != subject_key
            or normalise_attribute(fact.attribute) != attribute
        ):
            continue
        previous = group.get(fact.fact_id)
        if previous is not None and previous != fact:
            raise ValueError(f"two different versions of fact {fact.fact_id} were passed; pass each fact once")
        group[fact.fact_id] = fact
    return list(group.values())


def _observation_order(provenance: FactProvenance) -> tuple[datetime, str, str]:
    return (provenance.occurred_at, provenance.source, provenance.episode_id)


def _observe(
    candidate: FactCandidate,
    current: Fact | None,
    *,
    spec: AttributeSpec,
    subject_key: str,
    fact_id: str,
    now: datetime,
) -> Fact:
    """The fact with the candidate's observation added (status and validity are resolved later)."""
    observation = candidate.provenance
    volatility = candidate.volatility or spec.volatility
    if current is None:
        subject = USER_SUBJECT if subject_key == USER_SUBJECT else candidate.subject.strip()
        return Fact(
            fact_id=fact_id,
            tenant_id=candidate.tenant_id,
            user_id=candidate.user_id,
            scope=candidate.scope,
            subject=subject,
            attribute=spec.name,
            value=candidate.value.strip(),
            text=candidate.text.strip(),
            language=candidate.language,
            volatility=volatility,
            status="tentative",
            evidence_count=1,
            single_valued=spec.single_valued,
            valid_from=observation.occurred_at,
            provenance=[observation],
            created_at=now,
            updated_at=now,
            importance=candidate.scored_importance(),
        )
    provenance = sorted([*current.provenance, observation], key=_observation_order)
    # The most important observation counts (max: independent of the order candidates arrive in).
    importance = max(current.importance, candidate.scored_importance())
    updates: dict[str, object] = {"provenance": provenance, "evidence_count": len(provenance), "importance": importance}
    # The wording of the latest observation wins; comparing against the latest existing observation
    # (not the delivery order) keeps the result independent of the order candidates arrive in.
    if _observation_order(observation) > _observation_order(current.provenance[-1]):
        updates.update(text=candidate.text.strip(), language=candidate.language, volatility=volatility)
    return current.model_copy(update=updates)


def _resolve_timeline(facts: list[Fact], *, confirm_threshold: int) -> dict[str, Fact]:
    """Status and validity of every value of one single-valued attribute, from all observations.

    Observations sorted by time form runs of the same value; a value's latest run is its validity
    period, ended by the first observation of the next run (which names its successor)."""
    observations = sorted(
        ((_observation_order(p), fact.fact_id) for fact in facts for p in fact.provenance),
        key=lambda item: (item[0], item[1]),
    )
    runs: list[tuple[str, datetime]] = []  # (fact_id, start of run)
    for (occurred_at, _source, _episode), fid in observations:
        if not runs or runs[-1][0] != fid:
            runs.append((fid, occurred_at))
    last_run: dict[str, int] = {fid: index for index, (fid, _start) in enumerate(runs)}
    resolved: dict[str, Fact] = {}
    for fact in facts:
        index = last_run[fact.fact_id]
        start = runs[index][1]
        if index + 1 < len(runs):
            successor_id, successor_start = runs[index + 1]
            resolved[fact.fact_id] = fact.model_copy(
                update={
                    "valid_from": start,
                    "valid_to": successor_start,
                    "superseded_by": successor_id,
                    "status": "superseded",
                    "single_valued": True,
                }
            )
        else:
            resolved[fact.fact_id] = fact.model_copy(
                update={
                    "valid_from": start,
                    "valid_to": None,
                    "superseded_by": None,
                    "status": _live_status(fact, confirm_threshold),
                    "single_valued": True,
                }
            )
    return resolved


def _resolve_independent(fact: Fact, *, confirm_threshold: int) -> Fact:
    """Status and validity of a multi-valued fact: it is valid from its first observation. A fact
    superseded by something outside this policy (a future correction) stays superseded unless it is
    observed again after it ended."""
    first = fact.provenance[0].occurred_at
    last = fact.provenance[-1].occurred_at
    if fact.valid_to is not None and last < fact.valid_to:
        return fact.model_copy(update={"single_valued": False})
    if fact.valid_to is not None:
        restart = min(p.occurred_at for p in fact.provenance if p.occurred_at >= fact.valid_to)
        return fact.model_copy(
            update={
                "valid_from": restart,
                "valid_to": None,
                "superseded_by": None,
                "status": _live_status(fact, confirm_threshold),
                "single_valued": False,
            }
        )
    return fact.model_copy(
        update={"valid_from": first, "status": _live_status(fact, confirm_threshold), "single_valued": False}
    )


def _live_status(fact: Fact, confirm_threshold: int) -> FactStatus:
    """Confirmed once observed often enough, or once the user corrected memory to it; what the
    assistant said, an agent saved or extraction inferred waits for a second observation."""
    if fact.evidence_count >= confirm_threshold or any(p.user_correction for p in fact.provenance):
        return "confirmed"
    return "tentative"


def _differs(before: Fact, after: Fact) -> bool:
    return before.model_copy(update={"updated_at": after.updated_at}) != after


def _stamp(fact: Fact, now: datetime) -> Fact:
    return fact.model_copy(update={"updated_at": now})


def _outcome(
    target_before: Fact | None,
    target_after: Fact,
    before: dict[str, Fact],
    after: dict[str, Fact],
) -> FactWriteOutcome:
    if not target_after.is_current:
        return "historical"
    displaced = any(
        fact.is_current and fid != target_after.fact_id and not after[fid].is_current
        for fid, fact in before.items()
        if fid in after
    )
    if target_before is None:
        return "superseding" if displaced else "created"
    if not target_before.is_current:
        return "reactivated"
    return "superseding" if displaced else "reinforced"
