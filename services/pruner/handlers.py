"""The pruner service: its durable consumer (erasure requests), its background task (the prune
schedule and the control requests of `tiermem prune --now` / `tiermem audit`), and what it publishes.

The work lives in `prune` (the prune pass), `erasure` (the erasure saga, with its steps in
`erasure_steps` and `fact_erasure`), `control` and `schedule`."""

from __future__ import annotations

from collections.abc import Sequence

from faststream.nats import NatsBroker

from contracts import ErasureCompleted, ErasureRequested, PruneReport, Subjects
from services.common.runtime.durable_consumer import durable_subscriber
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.resources import ServiceContext
from services.common.runtime.service import PublishedEvent, ServiceDefinition
from services.pruner.erasure import ErasureRunner, StepHook
from services.pruner.logic import Clock, utc_now
from services.pruner.schedule import make_schedule
from services.pruner.settings import PrunerSettings

NAME = "pruner"
ERASURE_DURABLE = "pruner-erasure"


def consumers(subjects: Subjects) -> Sequence[ConsumerSpec]:
    return [
        ConsumerSpec(
            durable=ERASURE_DURABLE,
            stream=subjects.derived_stream,
            filter_subjects=(subjects.all_of("erasure.requested"),),
            description="Erases a user, a fact or an episode from every store.",
        )
    ]


def publishes(subjects: Subjects) -> Sequence[PublishedEvent]:
    return [
        PublishedEvent(
            subject=subjects.all_of("erasure.completed"),
            model=ErasureCompleted,
            description="pruner: an erasure finished; what it removed from each store.",
        ),
        PublishedEvent(
            subject=subjects.prune_completed(),
            model=PruneReport,
            description="pruner: a prune pass finished; what it removed.",
        ),
    ]


def build_definition(
    *, clock: Clock = utc_now, after_step: StepHook | None = None
) -> ServiceDefinition[PrunerSettings]:
    """The pruner service; tests pass a fake clock or a hook that crashes mid-erasure."""

    def register(broker: NatsBroker, ctx: ServiceContext[PrunerSettings]) -> None:
        (spec,) = consumers(ctx.subjects)
        runner = ErasureRunner(ctx, lambda: broker.connection.jetstream(), clock=clock, after_step=after_step)
        durable_subscriber(broker, ctx.settings.nats, spec, ErasureRequested, runner.handle, ctx.dead_letters)

    return ServiceDefinition(
        name=NAME,
        settings_type=PrunerSettings,
        consumers=consumers,
        register=register,
        background=make_schedule(clock),
        publishes=publishes,
    )


DEFINITION = build_definition()
