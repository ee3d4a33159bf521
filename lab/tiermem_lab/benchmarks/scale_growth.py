"""One user's growth curve for `tiermem bench scale`: the user's history grows to 10, 100 and 1,000
sessions and, at each size, L0 answers the same kind of question over HTTP; reported per size: latency
and the tokens and items injected per turn.

Two histories grow side by side, because "more sessions" changes two things a question meets:
- `recurring topics`: session n is about decision n of 500 over 144 project/component topics (cycled
  through), and a question names a topic. At 1,000 sessions a topic has ~7 sessions holding ~3.6
  distinct decisions that answer the question, so what L0 may inject grows with the history until the
  L0 cap (3 items / 300 tokens).
- `one matching session`: the questions ask about 10 topics that each have exactly one session; every
  other session is about another topic (often sharing the project or the component word). What
  answers a question never changes, so tokens per turn that grow here would be L0 injecting
  look-alikes as the history grows: this curve is the one that isolates growth.

The user's episodes are embedded with the model the questions are (not the seeding's word-hash
embedder): with word-hash memories the dense half of every candidate scored 0, and which memories L0
picks, so the tokens it injects, would not be what a real user's history gives."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from services.common.domain.owner import Owner
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.stores.episodes import EpisodeStore
from services.common.stores.vector.port import VectorIndex
from tiermem_lab.benchmarks.recall import BaseSentence, base_sentences, numbered_text, query_for
from tiermem_lab.benchmarks.scale_http import TENANT, serving, time_calls
from tiermem_lab.seeding import seeded_episode

RECURRING_USER = "grower"
SINGLE_MATCH_USER = "grower-one-match"
_PROBE_TOPICS = 10  # topics the one-matching-session questions ask about


@dataclass(frozen=True, slots=True)
class GrowingHistory:
    """Which decision each session is about: the `probes` once, in order, then `others` cycled through;
    and which decisions the questions ask about (the probes, or with none every decision written so far)."""

    user: str
    probes: Sequence[BaseSentence]
    others: Sequence[BaseSentence]

    def base_of(self, number: int) -> BaseSentence:
        if number < len(self.probes):
            return self.probes[number]
        return self.others[(number - len(self.probes)) % len(self.others)]

    def asked_about(self, size: int) -> Sequence[BaseSentence]:
        return self.probes or self.others[: min(size, len(self.others))]


def recurring_topics(bases: Sequence[BaseSentence]) -> GrowingHistory:
    return GrowingHistory(RECURRING_USER, (), bases)


def one_matching_session(bases: Sequence[BaseSentence], probe_count: int) -> GrowingHistory:
    """The first `probe_count` sessions are about topics (project and component) no other session is
    about; the questions ask about those alone."""
    probes: list[BaseSentence] = []
    for base in bases:
        if len(probes) < probe_count and all(_topic(base) != _topic(probe) for probe in probes):
            probes.append(base)
    taken = {_topic(probe) for probe in probes}
    return GrowingHistory(SINGLE_MATCH_USER, probes, [base for base in bases if _topic(base) not in taken])


def _topic(base: BaseSentence) -> tuple[str, str]:
    return base.project, base.component


@dataclass(frozen=True, slots=True)
class _Growing:
    """Where the histories are written and asked, and how far they grow."""

    store: EpisodeStore
    resources: Resources
    work: Path
    sizes: Sequence[int]
    questions: int
    seed: int


async def growth_phase(
    index: VectorIndex,
    keywords: KeywordEncoder,
    resources: Resources,
    work: Path,
    *,
    sizes: Sequence[int],
    questions: int,
    seed: int,
) -> dict[str, list[dict[str, Any]]]:
    """Both histories (module docstring) grown to each of `sizes`: one row per size each."""
    bases = base_sentences(500, random.Random(seed + 7))
    histories = {
        "recurring_topics": recurring_topics(bases),
        "one_matching_session": one_matching_session(bases, min(_PROBE_TOPICS, min(sizes))),
    }
    growing = _Growing(EpisodeStore(index, resources.embedder(), keywords), resources, work, sizes, questions, seed)
    return {name: await _grow(history, growing) for name, history in histories.items()}


async def _grow(history: GrowingHistory, growing: _Growing) -> list[dict[str, Any]]:
    owner = Owner(TENANT, history.user)
    rng = random.Random(growing.seed + 7)
    now = datetime.now(UTC)
    written = 0
    rows: list[dict[str, Any]] = []
    for size in growing.sizes:
        for number in range(written, size):
            summary = numbered_text(history.base_of(number), number)
            occurred = now - timedelta(days=rng.uniform(0, 90))
            episode = seeded_episode(owner, session_id=f"g{number}", summary=summary, occurred_at=occurred)
            await growing.store.write(owner, episode, [])
        written = size
        asked = history.asked_about(size)
        texts = [query_for(asked[rng.randrange(len(asked))], rng) for _ in range(growing.questions)]
        async with serving(growing.resources, growing.work) as http:
            bodies = [{"user_id": history.user, "message": text} for text in texts]
            latencies, answers = await time_calls(http, "/v1/recall/auto", bodies)
        rows.append({"sessions": size, **latencies.summary(), **_injected(answers)})
    return rows


def _injected(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    tokens = [float(answer.get("tokens", 0)) for answer in answers]
    items = sum(int(answer.get("injected", 0)) for answer in answers)
    return {
        "tokens_per_turn_mean": round(sum(tokens) / max(1, len(tokens)), 1),
        "tokens_per_turn_max": max(tokens, default=0.0),
        "items_per_turn_mean": round(items / max(1, len(answers)), 2),
        "tokens_per_item": round(sum(tokens) / items, 1) if items else None,
    }
