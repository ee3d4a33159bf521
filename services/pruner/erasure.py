"""Carrying out ErasureRequested events.

Erasure is a list of steps (`erasure_steps`, `fact_erasure`). Every step is idempotent and the whole
list is re-run on a redelivery, so a worker that crashes anywhere is finished by the next delivery;
the message is acked only after the last step. The steps end with a verification that raises (→ retry,
finally a dead letter with the reason) when a trace remains. A progress record in a JetStream
key-value bucket keeps the counts across deliveries, and what a fact erasure searches for, since the
fact point itself is deleted along the way."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from contracts import ErasureCompleted, ErasureRequested, Subjects
from services.common.domain.ids import is_uuid, owned_uuid, owner_message_id
from services.common.domain.owner import Owner
from services.common.runtime.durable_consumer import Delivery, PoisonMessage
from services.common.runtime.resources import ServiceContext
from services.common.stores.tombstones import Tombstone
from services.common.stores.value_places import erasure_progress_bucket
from services.pruner.erasure_steps import (
    EpisodeErasure,
    ErasureIncomplete,
    ErasureProgress,
    ErasureScope,
    Step,
    UserErasure,
    episode_sessions,
)
from services.pruner.fact_erasure import fact_erasure
from services.pruner.logic import Clock, add_counts, utc_now
from services.pruner.settings import PrunerSettings

__all__ = ["ErasureIncomplete", "ErasureProgress", "ErasureRunner", "ProgressStore", "StepHook"]

log = logging.getLogger(__name__)

StepHook = Callable[[str], Awaitable[None]]
"""Called after each erasure step with the step's name (tests use it to crash mid-erasure)."""


class ProgressStore:
    """Erasure progress records in a JetStream key-value bucket, one key per request."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, settings: PrunerSettings) -> None:
        self._js = js
        self.bucket = erasure_progress_bucket(subjects)
        self._ttl_s = settings.erasure_progress_ttl_hours * 3600
        self._replicas = settings.nats.replicas
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self.bucket)
            except BucketNotFoundError:
                self._kv = await self._js.create_key_value(
                    js_api.KeyValueConfig(
                        bucket=self.bucket,
                        description="Progress of erasures, so a crashed one resumes with its counts.",
                        ttl=self._ttl_s,
                        replicas=self._replicas,
                        storage=js_api.StorageType.FILE,
                    )
                )
        return self._kv

    async def load(self, key: str) -> ErasureProgress:
        kv = await self._bucket()
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return ErasureProgress()
        if not entry.value:
            return ErasureProgress()
        return ErasureProgress.model_validate_json(entry.value)

    async def save(self, key: str, progress: ErasureProgress) -> None:
        kv = await self._bucket()
        await kv.put(key, progress.model_dump_json().encode("utf-8"))


def progress_key(owner: Owner, event: ErasureRequested) -> str:
    """The request's progress record: keyed by owner too, as a request id is not known to be unique
    across owners (a producer on NATS chooses it)."""
    return f"{owner.tenant_id}.{owner.user_id}.{event.event_id}"


def _already_erased(tombstone: Tombstone | None, event: ErasureRequested) -> bool:
    """Whether the user's data up to the request's cut is erased already: this request was verified
    and settled before a crash, or a later erasure (a cut at or above this one) has completed."""
    if tombstone is None or tombstone.state != "erased":
        return False
    if tombstone.erasure_id == str(event.event_id):
        return True
    return (
        event.session_cut is not None
        and tombstone.session_cut is not None
        and tombstone.session_cut >= event.session_cut
    )


def _owner_of(event: ErasureRequested, delivery: Delivery, subjects: Subjects) -> Owner:
    """The user to erase; a request that cannot be carried out is poison (never retried)."""
    if subjects.tokens_from(delivery.subject) != (event.tenant_id, event.user_id):
        raise PoisonMessage(
            f"erasure request for {event.tenant_id}/{event.user_id} arrived on subject {delivery.subject}"
        )
    item_id = event.target.item_id
    if item_id is not None and not is_uuid(item_id):
        raise PoisonMessage(f"{event.target.kind} id {item_id!r} is not a UUID: no such {event.target.kind} exists")
    return Owner(event.tenant_id, event.user_id)


class ErasureRunner:
    """Carries out ErasureRequested events for one service context."""

    def __init__(
        self,
        ctx: ServiceContext[PrunerSettings],
        js: Callable[[], JetStreamContext],
        *,
        clock: Clock = utc_now,
        after_step: StepHook | None = None,
    ) -> None:
        self._ctx = ctx
        self._js_factory = js
        self._clock = clock
        self._after_step = after_step
        self._progress: ProgressStore | None = None

    @property
    def subjects(self) -> Subjects:
        return self._ctx.subjects

    @property
    def settings(self) -> PrunerSettings:
        return self._ctx.settings

    def _progress_store(self) -> ProgressStore:
        if self._progress is None:
            self._progress = ProgressStore(self._js_factory(), self.subjects, self.settings)
        return self._progress

    async def handle(self, event: ErasureRequested, delivery: Delivery) -> None:
        owner = _owner_of(event, delivery, self.subjects)
        key = progress_key(owner, event)
        store = self._progress_store()
        progress = await store.load(key)
        if progress.completed is not None:
            # Done before, but the ack was lost: publish the same record again (de-duplicated).
            await self._publish_completed(ErasureCompleted.model_validate_json(progress.completed))
            return
        progress.deliveries += 1
        steps = await self._steps(event, owner, progress, delivery)
        await store.save(key, progress)
        for name, step in steps:
            add_counts(progress.removed, await step())
            progress.steps_done.append(name)
            await store.save(key, progress)
            await delivery.in_progress()
            if self._after_step is not None:
                await self._after_step(name)
        completed = ErasureCompleted(
            event_id=owned_uuid(owner, "erasure-completed", str(event.event_id)),
            request_event_id=event.event_id,
            tenant_id=event.tenant_id,
            user_id=event.user_id,
            target=event.target,
            completed_at=self._clock(),
            removed=dict(sorted(progress.removed.items())),
        )
        progress.completed = completed.model_dump_json()
        progress.needles = []  # the erased text itself: kept only while the erasure may still resume
        await store.save(key, progress)
        await self._publish_completed(completed)
        self._ctx.count(f"erasures_{event.target.kind}")
        log.info(
            "erased %s %s of %s/%s after %d deliveries: %s",
            event.target.kind,
            event.target.item_id or "",
            event.tenant_id,
            event.user_id,
            progress.deliveries,
            completed.removed,
        )

    async def _steps(
        self, event: ErasureRequested, owner: Owner, progress: ErasureProgress, delivery: Delivery
    ) -> list[Step]:
        """The steps for the request's target; what they discover first is recorded in `progress`."""
        tombstones = await self._ctx.resources.tombstones()
        scope = ErasureScope(
            owner=owner,
            subjects=self.subjects,
            index=await self._ctx.resources.vector_index(),
            episodes=await self._ctx.resources.episodes(),
            facts=await self._ctx.resources.facts(),
            graph=await self._ctx.resources.graph(),
            js=self._js_factory,
            publisher=self._ctx.publisher,
            scan_limit=self.settings.scan_limit,
            tombstones=tombstones,
            drain_timeout_s=self.settings.erasure_drain_timeout_s,
            on_wait=delivery.in_progress,
        )
        if event.target.kind == "user":
            if _already_erased(await tombstones.get(owner), event):
                return []  # re-running would erase the user's newer work
            return UserErasure(scope, str(event.event_id), progress, event.requested_at, event.session_cut).steps()
        if event.target.kind == "fact":
            return (await fact_erasure(scope, event, progress, self._ctx.resources.keywords())).steps()
        episode_id = str(event.target.item_id)  # the contract requires an item id unless kind is 'user'
        sessions = await episode_sessions(scope, episode_id, progress)
        return EpisodeErasure(scope, episode_id, sessions, event.session_cut).steps()

    async def _publish_completed(self, completed: ErasureCompleted) -> None:
        await self._ctx.publisher.publish(
            completed,
            self.subjects.erasure_completed(completed.tenant_id, completed.user_id),
            msg_id=owner_message_id(
                Owner(completed.tenant_id, completed.user_id), "erasure-completed", completed.event_id
            ),
            stream=self.subjects.derived_stream,
        )
