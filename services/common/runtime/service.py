"""What every service package provides: its definition, and the context its handlers receive.
The composition root (runtime/root.py) runs definitions in every shape."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from faststream.nats import NatsBroker
from pydantic import BaseModel

from contracts import Subjects
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.resources import Resources, ServiceContext, SettingsT
from services.common.runtime.settings import TierMemSettings


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
    calls_llm: bool = False
    """Whether its handlers call the LLM (`resources.llm()`): a root running one imports litellm at
    start when a model is configured, so it is part of the frozen start-up heap (root.py)."""

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
