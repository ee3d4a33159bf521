"""Every place a remembered value can reach, in one list (`PLACES`), and the audit that searches them
for a string (`tiermem audit value`).

The erasure of a fact (`services/pruner/fact_erasure`) redacts place by place from this same list and
verifies with the same finders, so a store added here is audited and, because the erasure refuses to
run without a redaction for every place, redacted too. What counts as "the value" and how it is
matched is `services.common.domain.value_text`.

Places, upstream first (an erasure redacts in this order, so nothing still queued re-derives what was
just removed):
- `open_sessions`: turns (both roles, names) and metadata of per-turn sessions still open, in their
  key-value bucket (`stores/open_sessions`): what is there now reaches the session stream when the
  session closes;
- `sessions`: the raw SessionCompleted messages in the session stream, both roles, names, metadata;
- `derived_events`: the user's derived events (EpisodeCreated carries the summary, EntityUpserted the
  names); the erasure's own request and completion records carry only ids and are not searched;
- `dead_letters`: dead-letter records, and the failed message inside each;
- `episodes`, `passages`, `facts`: every string of every point payload (summary, abstract, messages,
  provenance, entity names, fact text and value);
- `keywords`: the keyword index itself: points whose sparse vector holds the term of a one-word
  needle (a name, a one-word value), asked of the index, so the payload and the index are checked
  apart (a phrase cannot be: the index keeps no word order; its words are found in the text places);
- `graph`: names and aliases of the entities the user contributed to, merged ones included (a merge
  keeps the folded name as an alias);
- `erasure_progress`: the erasure's own working copy of what it searches for (a resumed erasure must
  know it after the fact point is gone); cleared when the erasure completes, so it is audited but
  not checked by the erasure's own verification.

An erasure accepted with a cut (`ErasureRequested.session_cut`) searches with a `Lineage`: what the
user said again after its 202 (raw sessions above the cut, and what was derived from them; turns of an
open session appended after the 202, by the append time each turn keeps) is theirs to keep, so the
finders leave it out. The audit searches with none: it reports every copy.

Exports (`tiermem dump`) are made from the vector payloads and the graph, so a clean audit means a
clean dump; files an operator already wrote with `dump --out` are their copies and are not searched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from pydantic import BaseModel, ConfigDict, Field

from contracts import Subjects
from contracts.events import Scope
from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector
from services.common.domain.value_text import Needle, make_needle, text_mentions
from services.common.gateways.keywords import FALLBACK_MARKS, STEM_MARK, term_index
from services.common.stores.erasure import (
    ERASURE_RECORD_KINDS,
    stream_messages,
    subject_counts,
    subject_kind,
    user_derived_filter,
)
from services.common.stores.kv_keys import live_keys
from services.common.stores.open_sessions import OpenSessionRecord, OpenSessionStore
from services.common.stores.snapshot import COLLECTIONS, owners
from services.common.stores.vector.port import HybridWeights

if TYPE_CHECKING:
    from services.common.gateways.keywords import KeywordEncoder
    from services.common.stores.graph.repository import EntityRecord, GraphRepository
    from services.common.stores.vector.port import VectorIndex

SHOWN_PER_PLACE = 5
DEFAULT_SCAN_LIMIT = 100_000
"""Most items read per owner and place (the pruner uses its own TIERMEM_SCAN_LIMIT)."""
_SCOPES: tuple[Scope, ...] = ("personal", "team", "org")
_KEYWORD_ONLY = HybridWeights(keyword=1.0, dense=0.0)


class ScanLimitExceeded(RuntimeError):
    """A place holds more than `scan_limit` items of one owner: searching part of it proves nothing."""


class Lineage(Protocol):
    """Records a search leaves out because they came from sessions accepted after an erasure's cut."""

    def spares_message(self, stream: str, seq: int, data: Any) -> bool:
        """A stream message (`data`: its JSON-or-text body)."""
        ...

    def spares_point(self, collection: str, payload: Mapping[str, Any]) -> bool: ...

    def spares_entity(self, entity: EntityRecord) -> bool: ...

    def spares_turn(self, appended_at: datetime) -> bool:
        """An open session's turn (or its metadata, set when it opened) by when it was appended."""
        ...


@dataclass(frozen=True)
class PlaceStores:
    """The stores and streams the places are searched in (any owner's)."""

    subjects: Subjects
    js: JetStreamContext
    index: VectorIndex
    graph: GraphRepository
    keywords: KeywordEncoder
    scan_limit: int
    spared: Lineage | None = None
    """What the search leaves out (an erasure's later sessions); None: nothing, as the audit searches."""

    @property
    def progress_bucket(self) -> str:
        return erasure_progress_bucket(self.subjects)


def erasure_progress_bucket(subjects: Subjects) -> str:
    """The key-value bucket that keeps erasure progress records."""
    dlq = subjects.dead_letter_stream
    return (dlq.removesuffix("_DLQ") if dlq.endswith("_DLQ") else dlq) + "_ERASURE"


Finder = Callable[[PlaceStores, Owner, Sequence[Needle]], Awaitable[list[str]]]
"""Where in the place the owner's data mentions a needle: stream sequences, point ids, entity keys."""


@dataclass(frozen=True)
class Place:
    name: str
    find: Finder
    erasure_working_copy: bool = False
    """The erasure's own record of what it searches for: audited, cleared at completion, not verified."""


def json_or_text(data: bytes | None) -> Any:
    text = (data or b"").decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def with_inner_payload(data: Any) -> Any:
    """A dead-letter record and the failed message inside it (parsed when it is JSON)."""
    if isinstance(data, dict) and isinstance(data.get("payload"), str):
        return [data, json_or_text(data["payload"].encode("utf-8"))]
    return data


async def _stream_hits(
    stores: PlaceStores, stream: str, subject_filter: str, matches: Callable[[str, Any], bool]
) -> list[str]:
    found: list[str] = []
    async for message in stream_messages(stores.js, stream, subject_filter):
        if message.seq is None:
            continue
        data = json_or_text(message.data)
        if matches(message.subject or "", data) and not (
            stores.spared is not None and stores.spared.spares_message(stream, message.seq, data)
        ):
            found.append(str(message.seq))
    return found


async def find_in_sessions(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    subject = stores.subjects.session_completed(owner.tenant_id, owner.user_id)
    return await _stream_hits(
        stores, stores.subjects.session_stream, subject, lambda _subject, data: text_mentions(data, needles)
    )


async def find_in_derived_events(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    def matches(subject: str, data: Any) -> bool:
        return subject_kind(stores.subjects, subject) not in ERASURE_RECORD_KINDS and text_mentions(data, needles)

    subject_filter = user_derived_filter(stores.subjects, owner.tenant_id, owner.user_id)
    return await _stream_hits(stores, stores.subjects.derived_stream, subject_filter, matches)


async def find_in_dead_letters(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    subject_filter = stores.subjects.user_dead_letters(owner.tenant_id, owner.user_id)
    return await _stream_hits(
        stores,
        stores.subjects.dead_letter_stream,
        subject_filter,
        lambda _subject, data: text_mentions(with_inner_payload(data), needles),
    )


def open_turns_mentioning(record: OpenSessionRecord, needles: Sequence[Needle], spared: Lineage | None) -> list[int]:
    """Indexes of the record's turns that mention a needle and are not spared."""
    # Not strict: a closed record has dropped its turns and kept their times.
    return [
        index
        for index, (turn, appended_at) in enumerate(zip(record.turns, record.turn_appended_at, strict=False))
        if text_mentions(turn.model_dump(mode="json"), needles)
        and not (spared is not None and spared.spares_turn(appended_at))
    ]


def open_metadata_mentions(record: OpenSessionRecord, needles: Sequence[Needle], spared: Lineage | None) -> bool:
    """The record's metadata (set by the session's first append) mentions a needle and is not spared."""
    return text_mentions(record.metadata, needles) and not (spared is not None and spared.spares_turn(record.opened_at))


async def open_session_store(js: JetStreamContext, subjects: Subjects) -> OpenSessionStore | None:
    """The open-session bucket, or None where there is none (searching never creates it)."""
    store = OpenSessionStore(js, subjects)
    try:
        await js.key_value(store.bucket)
    except BucketNotFoundError:
        return None
    return store


async def find_in_open_sessions(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    """The owner's open sessions (`session_id#turn` per turn, `session_id#metadata`) still holding a needle."""
    store = await open_session_store(stores.js, stores.subjects)
    if store is None or not needles:
        return []
    found: list[str] = []
    for key in await store.keys(owner):
        stored = await store.get(key.owner, key.session_id)
        if stored is None:
            continue
        if open_metadata_mentions(stored.record, needles, stores.spared):
            found.append(f"{key.session_id}#metadata")
        found.extend(
            f"{key.session_id}#{index}" for index in open_turns_mentioning(stored.record, needles, stores.spared)
        )
    return found


def _points_finder(collection: str) -> Finder:
    async def find(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
        if not needles:
            return []
        records = await stores.index.scroll(collection, owner, None, stores.scan_limit)
        if len(records) >= stores.scan_limit:
            raise ScanLimitExceeded(
                f"{collection} of {owner.tenant_id}/{owner.user_id} holds more than scan_limit={stores.scan_limit} "
                "points; raise TIERMEM_SCAN_LIMIT to search them by text"
            )
        return [
            record.id
            for record in records
            if text_mentions(record.payload, needles)
            and not (stores.spared is not None and stores.spared.spares_point(collection, record.payload))
        ]

    return find


def keyword_terms(keywords: KeywordEncoder, needle: Needle) -> list[int]:
    """The index terms of a needle the keyword index can be asked about: a single word (a name, a
    one-word value) that is not told apart by its case. A phrase cannot be: the index holds words
    without their order, so "pine nuts" would be found in "pine cones and nuts"; its words are
    searched in the text places instead."""
    if needle.case_sensitive:
        return []  # "Go" and "go" are one term in the index
    tokens = keywords.tokens(needle.text)
    words = {token for token in tokens if not token.startswith(FALLBACK_MARKS)}
    if len(words) != 1:
        return []
    # Not the English stem: "~run" is in every text that says "running", and the erasure removes the
    # points found here (gateways/keywords.py).
    return sorted({term_index(token) for token in tokens if not token.startswith(STEM_MARK)})


async def keyword_holders(stores: PlaceStores, owner: Owner, collection: str, needle: Needle) -> set[str]:
    """Points of the owner whose keyword vector holds every term of the needle (see `keyword_terms`)."""
    holders: set[str] | None = None
    for term in keyword_terms(stores.keywords, needle):
        hits = await stores.index.hybrid_query(
            collection,
            owner,
            dense=None,
            sparse=SparseVector(indices=[term], values=[1.0]),
            weights=_KEYWORD_ONLY,
            limit=stores.scan_limit,
        )
        found = {
            hit.id
            for hit in hits
            if (hit.keyword_score or hit.score) > 0
            and not (stores.spared is not None and stores.spared.spares_point(collection, hit.payload))
        }
        holders = found if holders is None else holders & found
        if not holders:
            return set()
    return holders or set()


async def find_in_keywords(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    found: set[str] = set()
    for collection in COLLECTIONS:
        for needle in needles:
            found.update(
                f"{collection}:{point_id}" for point_id in await keyword_holders(stores, owner, collection, needle)
            )
    return sorted(found)


async def entities_of(graph: GraphRepository, owner: Owner, limit: int) -> list[EntityRecord]:
    """Every entity the owner contributed to, in every scope."""
    found: list[EntityRecord] = []
    for scope in _SCOPES:
        listed = await graph.list_entities(owner, scope, limit=limit)
        if len(listed) >= limit:
            raise ScanLimitExceeded(f"more than {limit} {scope} entities visible to {owner.tenant_id}/{owner.user_id}")
        found.extend(entity for entity in listed if owner.user_id in entity.user_ids)
    return found


async def entities_naming(
    graph: GraphRepository, owner: Owner, needles: Sequence[Needle], limit: int
) -> list[EntityRecord]:
    """The owner's entities whose name or an alias mentions a needle."""
    if not needles:
        return []
    return [
        entity
        for entity in await entities_of(graph, owner, limit)
        if text_mentions([entity.name, *entity.aliases], needles)
    ]


async def find_in_graph(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    return [
        entity.key
        for entity in await entities_naming(stores.graph, owner, needles, stores.scan_limit)
        if not (stores.spared is not None and stores.spared.spares_entity(entity))
    ]


async def find_in_erasure_progress(stores: PlaceStores, owner: Owner, needles: Sequence[Needle]) -> list[str]:
    """Progress records of the owner's erasures that still hold a needle."""
    try:
        kv = await stores.js.key_value(stores.progress_bucket)
        keys = await live_keys(stores.js, kv, stores.progress_bucket, ">")
    except BucketNotFoundError:
        return []
    found = []
    for key in keys:
        if not _progress_of(key, owner):
            continue
        try:
            record = json_or_text((await kv.get(key)).value)
        except KeyNotFoundError:  # expired or settled since it was listed
            continue
        if isinstance(record, dict) and text_mentions(record.get("needles"), needles):
            found.append(key)
    return found


def _progress_of(key: str, owner: Owner) -> bool:
    """Progress keys are `tenant.user.request`; a bare request id (a record from before keys carried
    the owner) is searched for every owner."""
    return "." not in key or key.startswith(f"{owner.tenant_id}.{owner.user_id}.")


PLACES: tuple[Place, ...] = (
    Place("open_sessions", find_in_open_sessions),
    Place("sessions", find_in_sessions),
    Place("derived_events", find_in_derived_events),
    Place("dead_letters", find_in_dead_letters),
    Place("episodes", _points_finder("episodes")),
    Place("passages", _points_finder("passages")),
    Place("facts", _points_finder("facts")),
    Place("keywords", find_in_keywords),
    Place("graph", find_in_graph),
    Place("erasure_progress", find_in_erasure_progress, erasure_working_copy=True),
)
PLACE_NAMES: tuple[str, ...] = tuple(place.name for place in PLACES)


class ValueAudit(BaseModel):
    """Where a string was found, per owner and place; `total` 0 means nowhere."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    owners: list[str] = Field(description="The owners searched, as tenant/user.")
    counts: dict[str, int] = Field(description="Hits per place, every place listed (zeros included).")
    found: dict[str, list[str]] = Field(description="Per 'tenant/user place': the first hits (sequences, ids, keys).")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def places(self) -> list[str]:
        return [name for name, count in self.counts.items() if count]


class ValueAuditRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1, max_length=2000)
    tenant_id: str | None = None
    user_id: str | None = None


async def owners_to_search(stores: PlaceStores, tenant_id: str | None, user_id: str | None) -> list[Owner]:
    """The one owner named, or every owner (of the tenant, when named) with anything stored."""
    if tenant_id is not None and user_id is not None:
        return [Owner(tenant_id, user_id)]
    found = set(await owners(stores.index, stores.graph.executor))
    for stream, subject_filter in (
        (stores.subjects.session_stream, stores.subjects.all_session_completed()),
        (stores.subjects.derived_stream, f"{stores.subjects.root}.*.*.v1.*.*"),
    ):
        for subject in await subject_counts(stores.js, stream, subject_filter):
            tenant, user = stores.subjects.tokens_from(subject)
            if tenant and user:
                found.add(Owner(tenant, user))
    store = await open_session_store(stores.js, stores.subjects)
    if store is not None:
        found.update(key.owner for key in await store.keys())
    selected = [owner for owner in found if tenant_id is None or owner.tenant_id == tenant_id]
    return sorted(selected, key=lambda owner: (owner.tenant_id, owner.user_id))


async def audit_value(
    stores: PlaceStores, text: str, *, tenant_id: str | None = None, user_id: str | None = None
) -> ValueAudit:
    """Search every place of the owner (or of every owner of the tenant, or of everyone) for `text`,
    matched as the erasure matches a value."""
    needle = make_needle(text)
    if needle is None:
        raise ValueError("give a non-blank text to search for")
    searched = await owners_to_search(stores, tenant_id, user_id)
    counts = dict.fromkeys(PLACE_NAMES, 0)
    found: dict[str, list[str]] = {}
    for owner in searched:
        for place in PLACES:
            hits = await place.find(stores, owner, [needle])
            counts[place.name] += len(hits)
            if hits:
                found[f"{owner.tenant_id}/{owner.user_id} {place.name}"] = hits[:SHOWN_PER_PLACE]
    return ValueAudit(
        text=needle.text,
        owners=[f"{owner.tenant_id}/{owner.user_id}" for owner in searched],
        counts=counts,
        found=found,
    )
