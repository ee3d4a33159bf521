"""The entity graph's data model: what the nodes and edges hold, how entities are keyed, and the typed
records the repository returns. The Cypher lives in `write_queries`, `read_queries` and
`erasure_queries`, portable across FalkorDB and Neo4j; `repository.GraphRepository` runs it.

Model
- `(:Entity {key, tenant_id, scope, name, name_norm, entity_type, aliases, alias_norms, alias_sources,
  group_sources, user_ids, episode_ids, merged_keys, canonical, created_at_ts, updated_at_ts})`. The key is a uuid5 of
  (tenant, owner part, normalised name): the owner part is "user:<id>" for personal entities and the
  scope for team/org entities, which all users of the tenant share. `user_ids` says which users
  contributed; `alias_sources` holds "<user_id>:<alias_norm>:<alias>" so erasing a user removes the
  surface forms only that user contributed (`aliases` and `alias_norms` are derived from it).
  `group_sources` holds "<user_id>:<alias_norm>" for every surface form (name or alias) seen in a
  *group-channel* session; a form absent from it was learned only in private sessions.
  `merged_keys` lists the keys folded into this node, so a later upsert of a merged name lands here
  instead of re-creating the duplicate.
- `(:Episode {key: episode_id, tenant_id, user_id, session_id, occurred_at_ts})-[:MENTIONS]->(:Entity)`.
- `(:Entity)-[:RELATED {type, scope, tenant_id, user_ids, episode_ids, valid_from_ts, valid_to_ts,
  last_asserted_ts, created_at_ts, updated_at_ts}]->(:Entity)`, one edge per (source, type, scope,
  target); the type is a property because relationship types cannot be parameters. `valid_to_ts` null =
  current.
- Invariant: every user in an edge's `user_ids` is in both endpoints' `user_ids`, so a shared node
  that loses its last user has no edge anybody still needs.

Times are epoch-second floats (`*_ts`): `datetime()` does not exist in FalkorDB.

Visibility: an owner sees personal nodes they contributed to and every team/org node of their tenant;
never another tenant's, never another user's personal nodes. Edges are visible when they are in the
tenant, are not another user's personal edge, and both endpoints are visible.

Channels (issue 11): in a group channel only surface forms in `group_sources` exist — a name or alias
learned in a private session is neither shown nor matched there (`channel_view`, `matches_text`); an
entity with no group form is not visible at all. Visibility classes are never mixed by dedup: two
nodes are merged only when they have the same scope, the same contributing users and the same channel
class (seen in a group session or private only), so a merge cannot carry one user's or one private
session's surface forms onto a node another user or a group channel sees.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from contracts.events import Scope
from services.common.domain.owner import Owner

ENTITY_KEY_NAMESPACE = uuid.UUID("5b0c7d3e-8f6a-5d2b-9c41-7e3a2f1d0b64")
DEFAULT_ENTITY_TYPE = "other"
_SCOPES: frozenset[str] = frozenset({"personal", "team", "org"})
# Punctuation that distinguishes names people actually use (C#, F#); '+' is a symbol and kept anyway.
_KEPT_PUNCTUATION = frozenset("#")


class EntityNotFoundError(LookupError):
    """No entity with that key is visible to the owner."""


class RelationNotFoundError(LookupError):
    """No relation with that source, type and target is visible to the owner."""


def normalise_entity_name(name: str) -> str:
    """NFKC + casefold, then drop whitespace, punctuation and control characters, so "온비서" and
    "온 비서", or "DGIA", "dgia" and "D.G.I.A.", normalise alike. Letters, digits, marks and symbols
    stay ("C++" ≠ "C"), as does '#' ("C#" ≠ "C")."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    kept = []
    for char in folded:
        category = unicodedata.category(char)
        if category[0] in "ZC":
            continue
        if category[0] == "P" and char not in _KEPT_PUNCTUATION:
            continue
        kept.append(char)
    # casefold can produce sequences NFKC would compose differently; normalise once more.
    return unicodedata.normalize("NFKC", "".join(kept))


def normalise_relation_type(relation_type: str) -> str:
    """ "Works on", "works-on" and "WORKS_ON" → "works_on"."""
    folded = unicodedata.normalize("NFKC", relation_type).casefold().strip()
    words = "".join(char if char.isalnum() else " " for char in folded).split()
    if not words:
        raise ValueError(f"relation type {relation_type!r} has no letters or digits")
    return "_".join(words)


def check_scope(scope: str) -> None:
    """Scopes reach Cypher as parameters typed only as strings; refuse anything outside the model."""
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of personal, team, org; got {scope!r}")


def entity_key(owner: Owner, scope: Scope, name: str) -> str:
    """Deterministic key of the entity `name` in `scope` for `owner`: personal entities are per user,
    team/org entities are shared by the tenant. The entity type plays no part, so "Kim (person)" and
    "Kim (other)" are one node."""
    check_scope(scope)
    norm = normalise_entity_name(name)
    if not norm:
        raise ValueError(f"entity name {name!r} has nothing left after normalisation")
    owner_part = f"user:{owner.user_id}" if scope == "personal" else scope
    return str(uuid.uuid5(ENTITY_KEY_NAMESPACE, f"{owner.tenant_id}\x1f{owner_part}\x1f{norm}"))


def alias_source(user_id: str, alias: str) -> str:
    """The `alias_sources` entry recording that `user_id` contributed the surface form `alias`."""
    # user ids and normalised names contain no ':' (normalisation drops punctuation), so both splits
    # are unambiguous even when the alias itself contains ':'.
    return f"{user_id}:{normalise_entity_name(alias)}:{alias}"


def group_source(user_id: str, alias: str) -> str:
    """The `group_sources` entry recording that `user_id` used `alias` in a group-channel session."""
    return f"{user_id}:{normalise_entity_name(alias)}"


@dataclass(frozen=True, slots=True)
class EntityInput:
    """An entity as extracted from an episode."""

    name: str
    entity_type: str = DEFAULT_ENTITY_TYPE
    aliases: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class EpisodeRef:
    """The episode a write came from: provenance on nodes and edges."""

    episode_id: str
    session_id: str
    occurred_at_ts: float


@dataclass(frozen=True, slots=True)
class RelationInput:
    """`source -[relation_type]-> target`; keys as returned by `upsert_entities` or `entity_key`.
    `valid_from_ts` defaults to the episode's time, else now."""

    source_key: str
    relation_type: str
    target_key: str
    valid_from_ts: float | None = None


@dataclass(frozen=True, slots=True)
class EntityUpsertResult:
    key: str
    name: str
    entity_type: str
    aliases: tuple[str, ...]
    created: bool
    changed: bool
    """True when the node was created or any property changed; replays leave it False."""

    @property
    def status(self) -> Literal["created", "changed", "unchanged"]:
        if self.created:
            return "created"
        return "changed" if self.changed else "unchanged"


class EntityUpserts(list[EntityUpsertResult]):
    """The results of `upsert_entities`, one per distinct input name in order of first appearance,
    and which live node each input name landed on (a merged-away key redirects to its survivor), so
    callers never recompute the key scheme."""

    def __init__(self, results: Sequence[EntityUpsertResult], live_keys: Mapping[str, str]) -> None:
        super().__init__(results)
        self.live_keys: Mapping[str, str] = dict(live_keys)
        """Normalised input name → key of the live node."""

    def key_for(self, name: str) -> str | None:
        """The live node's key for an input name, in any spelling that normalises alike; None for a
        name that was not upserted."""
        return self.live_keys.get(normalise_entity_name(name))


@dataclass(frozen=True, slots=True)
class RelationUpsertResult:
    source_key: str
    relation_type: str
    target_key: str
    created: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class EntityRecord:
    key: str
    tenant_id: str
    scope: str
    name: str
    name_norm: str
    entity_type: str
    aliases: tuple[str, ...]
    user_ids: tuple[str, ...]
    episode_ids: tuple[str, ...]
    merged_keys: tuple[str, ...]
    created_at_ts: float | None
    updated_at_ts: float | None
    group_norms: tuple[str, ...] = ()
    """Normalised surface forms seen in a group-channel session (see the module docstring)."""

    @property
    def channel_class(self) -> Literal["group", "private"]:
        """ "group" once any of its forms was seen in a group session, else "private"."""
        return "group" if self.group_norms else "private"


def channel_view(record: EntityRecord, channel: str) -> EntityRecord | None:
    """The entity as `channel` may see it. Private: unchanged. Group: only the forms seen in a
    group session (the name becomes one of them if it was private); None when it has none."""
    if channel != "group":
        return record
    group = set(record.group_norms)
    aliases = tuple(alias for alias in record.aliases if normalise_entity_name(alias) in group)
    if record.name_norm in group:
        return replace(record, aliases=aliases)
    if not aliases:
        return None
    return replace(record, name=aliases[0], name_norm=normalise_entity_name(aliases[0]), aliases=aliases)


def matches_text(record: EntityRecord, text: str) -> bool:
    """Whether the (channel-viewed) entity's name or an alias contains the normalised `text`, as
    the graph search matches: a group search must not match a form only a private session taught."""
    norm = normalise_entity_name(text)
    return bool(norm) and any(norm in form for form in (record.name_norm, *map(normalise_entity_name, record.aliases)))


@dataclass(frozen=True, slots=True)
class RelationRecord:
    source_key: str
    relation_type: str
    target_key: str
    scope: str
    user_ids: tuple[str, ...]
    episode_ids: tuple[str, ...]
    valid_from_ts: float | None
    valid_to_ts: float | None
    """None while the relation holds."""
    last_asserted_ts: float | None

    @property
    def is_current(self) -> bool:
        return self.valid_to_ts is None


@dataclass(frozen=True, slots=True)
class GraphResult:
    entities: list[EntityRecord] = field(default_factory=list)
    relations: list[RelationRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MergeResult:
    canonical_key: str
    merged_keys: tuple[str, ...]
    """Duplicates folded into the canonical node by this call (empty on a re-run)."""
    already_merged_keys: tuple[str, ...]
    """Requested duplicates that an earlier merge already folded into the canonical node."""
    not_found_keys: tuple[str, ...]
    """Requested duplicates that are not visible to the owner or not in the canonical node's scope."""
    aliases: tuple[str, ...]
    relations_repointed: int
    self_loops_dropped: int

    @property
    def changed(self) -> bool:
        return bool(self.merged_keys)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def entity_record(node: Mapping[str, Any]) -> EntityRecord:
    """An :Entity node's properties as the executor returns them → typed record."""
    return EntityRecord(
        key=str(node["key"]),
        tenant_id=str(node.get("tenant_id", "")),
        scope=str(node.get("scope", "")),
        name=str(node.get("name", "")),
        name_norm=str(node.get("name_norm", "")),
        entity_type=str(node.get("entity_type", DEFAULT_ENTITY_TYPE)),
        aliases=_strings(node.get("aliases")),
        user_ids=_strings(node.get("user_ids")),
        episode_ids=_strings(node.get("episode_ids")),
        merged_keys=_strings(node.get("merged_keys")),
        created_at_ts=_float_or_none(node.get("created_at_ts")),
        updated_at_ts=_float_or_none(node.get("updated_at_ts")),
        group_norms=tuple(dict.fromkeys(source.split(":", 1)[1] for source in _strings(node.get("group_sources")))),
    )


def relation_record(source_key: str, edge: Mapping[str, Any], target_key: str) -> RelationRecord:
    """A RELATED edge's properties and its endpoints' keys → typed record."""
    return RelationRecord(
        source_key=source_key,
        relation_type=str(edge.get("type", "")),
        target_key=target_key,
        scope=str(edge.get("scope", "")),
        user_ids=_strings(edge.get("user_ids")),
        episode_ids=_strings(edge.get("episode_ids")),
        valid_from_ts=_float_or_none(edge.get("valid_from_ts")),
        valid_to_ts=_float_or_none(edge.get("valid_to_ts")),
        last_asserted_ts=_float_or_none(edge.get("last_asserted_ts")),
    )
