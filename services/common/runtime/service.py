"""What every service package provides, and the app factory that runs one service alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from faststream import FastStream
from faststream.nats import NatsBroker
from pydantic import BaseModel

from contracts import Subjects
from services.common.runtime.broker import (
    ConsumerSpec,
    DeadLetterWriter,
    EventPublisher,
    build_broker,
    connect_nats,
    provision,
)
from services.common.runtime.resources import Resources, ServiceContext, SettingsT
from services.common.runtime.settings import TierMemSettings, load_settings


@dataclass(frozen=True)
class PublishedEvent:
    """One kind of event a service publishes: the AsyncAPI document is derived from these."""

    subject: str
    """The subject pattern (wildcards for the tenant and user tokens)."""
    model: type[BaseModel]
    description: str


def _publishes_nothing(subjects: Subjects) -> Sequence[PublishedEvent]:
    return ()


@dataclass(frozen=True)
class ServiceDefinition(Generic[SettingsT]):
    """A consumer service: its name, its settings class, its durable consumers, and how it
    registers its handlers."""

    name: str
    settings_type: type[SettingsT]
    consumers: Callable[[Subjects], Sequence[ConsumerSpec]]
    register: Callable[[NatsBroker, ServiceContext[SettingsT]], None]
    background: Callable[[ServiceContext[SettingsT]], Coroutine[Any, Any, None]] | None = None
    """Optional long-running task (e.g. the pruner's schedule), started once the broker runs and
    cancelled at shutdown."""
    publishes: Callable[[Subjects], Sequence[PublishedEvent]] = _publishes_nothing
    """What the service publishes (dead letters excepted); the AsyncAPI document lists these."""

    def settings_from(self, base: TierMemSettings) -> SettingsT:
        """This service's settings: the shared values of `base`, plus its own fields from the
        environment."""
        return self.settings_type(**base.model_dump())


def build_context(
    settings: SettingsT, broker: NatsBroker, resources: Resources | None = None
) -> ServiceContext[SettingsT]:
    subjects = Subjects(settings.nats.subject_root)
    publisher = EventPublisher(broker)
    return ServiceContext(
        settings=settings,
        subjects=subjects,
        publisher=publisher,
        dead_letters=DeadLetterWriter(publisher, subjects),
        resources=resources or Resources(settings),
    )


async def provision_for(settings: TierMemSettings, services: Sequence[ServiceDefinition[Any]]) -> None:
    """Create streams and the services' durable consumers (idempotent) before subscribers bind."""
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "tiermem-provisioner")
    try:
        specs = [spec for service in services for spec in service.consumers(subjects)]
        await provision(client.jetstream(), settings.nats, specs)
    finally:
        await client.close()


def create_service_app(definition: ServiceDefinition[SettingsT], base: TierMemSettings | None = None) -> FastStream:
    """One service alone against external servers: how Kubernetes runs it
    (`tiermem serve NAME`, or `faststream run services.NAME.app:create_app --factory`)."""
    settings = definition.settings_from(base or load_settings())
    broker = build_broker(settings, definition.name)
    context = build_context(settings, broker)
    definition.register(broker, context)
    app = FastStream(broker)
    background: list[asyncio.Task[None]] = []

    @app.on_startup
    async def _provision() -> None:
        await provision_for(settings, [definition])

    @app.after_startup
    async def _start_background() -> None:
        if definition.background is not None:
            background.append(asyncio.create_task(definition.background(context)))

    @app.on_shutdown
    async def _stop_background() -> None:
        for task in background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @app.after_shutdown
    async def _close() -> None:
        await context.resources.close()

    return app
