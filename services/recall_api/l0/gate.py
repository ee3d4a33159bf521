"""The L0 gate, pure: which of the ranked candidates are worth injecting on this turn.

An absolute minimum score alone trades recall for contamination along one curve (measured on LoCoMo:
raising it from 0.30 to 0.55 halves recall to cut contamination from 0.69 to 0.40). These rules move
the curve instead, each a general property of a good injection, not a tuned list:

- **Agreement.** Both halves of the hybrid score must see the item: some keyword evidence and some
  dense similarity. One rare shared word with no semantic similarity (or a vaguely similar topic
  without a single shared term) is what most wrong injections look like.
- **Agreement relative to the query.** The dense part must also reach a share of the best dense part
  among the candidates: a memory that the keyword half ranks first on one shared everyday word
  ("준비", "plan") while another memory is several times closer in meaning is the wrong one. A share of
  the query's own best, not an absolute bar, so it holds for queries (and models) whose dense parts
  all sit high or all sit low.
- **Distance from the top.** Only items close to the best one are injected: relevance is compared to
  the query's own top relevance, so the gate adapts to queries (and users) whose scores all sit high
  or all sit low, where one absolute threshold cannot.
- **One item per session, facts first.** Two items from the same conversation say mostly the same;
  the second costs tokens and is one more chance to mislead. When a fact and its session's episode
  both pass and the fact is about as relevant, the fact is kept (short, exact, with its own
  provenance) and the episode dropped.
- **A tentative fact needs its session.** A fact extracted once (tentative, not saved on purpose) is
  one reading of one sentence; being a short text, its keyword part runs high on a shared name alone
  ("Melanie likes camping trips" for any question about Melanie). When anything firmer passed the
  minimum score, it neither sets the top nor gets injected on its own: only in place of its session's
  episode when that episode passes too. (With nothing firmer, e.g. facts saved without an episode,
  it is judged like any other item.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GateItem:
    """What the gate knows of one ranked candidate. `sessions`: the sessions it was stated in (an
    episode's one, every session of a fact's provenance). `dense` / `keyword`: the parts of its fused
    relevance (None: unknown, the agreement rule then does not apply)."""

    kind: str
    relevance: float
    sessions: frozenset[str]
    dense: float | None = None
    keyword: float | None = None
    standalone: bool = True  # False: only injected with its session's episode (a tentative fact)


@dataclass(frozen=True, slots=True)
class L0GatePolicy:
    """`relative_margin`: items more than this below the best relevance are left out (None: off).
    `min_dense` / `min_keyword`: the least dense and keyword part an item needs (0: off).
    `min_dense_share`: the least dense part relative to the best one among the items (0: off).
    `one_per_session`: at most one item per session. `fact_margin`: a fact at most this much less
    relevant than its session's episode takes the episode's place."""

    relative_margin: float | None = 0.1
    min_dense: float = 0.0
    min_keyword: float = 0.0
    min_dense_share: float = 0.0  # least share of the candidates' best dense part an item needs (0: off)
    one_per_session: bool = True
    fact_margin: float = 0.05


def agrees(item: GateItem, policy: L0GatePolicy) -> bool:
    """Both branches of the hybrid score see the item (unknown parts pass)."""
    if item.dense is not None and item.dense < policy.min_dense:
        return False
    return item.keyword is None or item.keyword >= policy.min_keyword


def _facts_first(order: list[int], items: Sequence[GateItem], fact_margin: float) -> list[int]:
    """An episode followed (anywhere lower) by a fact of its session that is nearly as relevant gives
    its place to that fact."""
    out = list(order)
    for position, index in enumerate(out):
        episode = items[index]
        if episode.kind != "episode":
            continue
        for later in out[position + 1 :]:
            fact = items[later]
            if (
                fact.kind == "fact"
                and fact.sessions & episode.sessions
                and fact.relevance >= episode.relevance - fact_margin
            ):
                out.remove(later)
                out[position] = later
                break
    return out


def _one_per_session(order: Sequence[int], items: Sequence[GateItem]) -> list[int]:
    """Keep an item only when it brings a session not yet covered (items without a known session are
    kept)."""
    covered: set[str] = set()
    kept: list[int] = []
    for index in order:
        sessions = items[index].sessions
        if sessions and sessions <= covered:
            continue
        covered |= sessions
        kept.append(index)
    return kept


def _supported(order: Sequence[int], items: Sequence[GateItem]) -> list[int]:
    """Standalone items, and the others whose session a standalone item in `order` covers."""
    covered = {s for i in order if items[i].standalone for s in items[i].sessions}
    return [i for i in order if items[i].standalone or items[i].sessions & covered]


def _near_the_best_dense(order: list[int], items: Sequence[GateItem], share: float) -> list[int]:
    """The items whose dense part is at least `share` of the best one (unknown parts pass)."""
    known = [dense for i in order if (dense := items[i].dense) is not None]
    if share <= 0 or not known or max(known) <= 0:
        return order
    least = share * max(known)
    return [i for i in order if (dense := items[i].dense) is None or dense >= least]


def gate(items: Sequence[GateItem], policy: L0GatePolicy) -> list[int]:
    """Indexes of the items to inject, in injection order. `items` come ranked (best first) and
    already past the absolute minimum score."""
    order = [i for i, item in enumerate(items) if agrees(item, policy)]
    order = _near_the_best_dense(order, items, policy.min_dense_share)
    if not order:
        return []
    standalone = [items[i].relevance for i in order if items[i].standalone]
    if policy.relative_margin is not None:
        top = max(standalone or [items[i].relevance for i in order])
        order = [i for i in order if items[i].relevance >= top - policy.relative_margin]
    if standalone:
        order = _supported(order, items)
    if policy.one_per_session:
        order = _one_per_session(_facts_first(order, items, policy.fact_margin), items)
    return order
