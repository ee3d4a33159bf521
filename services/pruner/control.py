"""The control requests a running pruner answers: `tiermem prune --now`, `tiermem audit user` and
`tiermem audit value`. The
running pruner owns the stores (a Qdrant Edge shard cannot be opened by a second process), so the CLI
asks it over core NATS request/reply, one replica per request through a queue group."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from pydantic import BaseModel

from services.common.domain.owner import Owner
from services.common.runtime.broker import connect_nats
from services.common.runtime.dead_letters import describe_error
from services.common.runtime.resources import ServiceContext
from services.common.stores.erasure import CONTROL_QUEUE, AuditRequest, ControlReply, audit_user, control_subject
from services.common.stores.value_places import PlaceStores, ValueAuditRequest, audit_value
from services.pruner.logic import Clock
from services.pruner.prune import prune_once
from services.pruner.settings import PrunerSettings

log = logging.getLogger(__name__)

CONTROL_CLIENT_NAME = "tiermem-pruner-control"


async def _reply(msg: Msg, work: Callable[[], Awaitable[BaseModel]]) -> None:
    """Answer with the result of `work`, or with the error it raised (the CLI prints it)."""
    try:
        result = await work()
        answer = ControlReply(result=result.model_dump(mode="json"))
    except Exception as exc:
        log.exception("control request on %s failed", msg.subject)
        answer = ControlReply(error=describe_error(exc))
    await msg.respond(answer.model_dump_json().encode("utf-8"))


async def serve_control(ctx: ServiceContext[PrunerSettings], clock: Clock) -> NatsClient:
    """Subscribe to the prune and audit requests; the caller drains the returned connection."""
    nc = await connect_nats(ctx.settings.nats, CONTROL_CLIENT_NAME)

    async def on_prune(msg: Msg) -> None:
        await _reply(msg, lambda: prune_once(ctx, clock()))

    async def on_audit(msg: Msg) -> None:
        async def audit() -> BaseModel:
            request = AuditRequest.model_validate_json(msg.data)
            return await audit_user(
                index=await ctx.resources.vector_index(),
                graph=await ctx.resources.graph(),
                js=nc.jetstream(),
                subjects=ctx.subjects,
                owner=Owner(request.tenant_id, request.user_id),
            )

        await _reply(msg, audit)

    async def on_audit_value(msg: Msg) -> None:
        async def audit() -> BaseModel:
            request = ValueAuditRequest.model_validate_json(msg.data)
            stores = PlaceStores(
                subjects=ctx.subjects,
                js=nc.jetstream(),
                index=await ctx.resources.vector_index(),
                graph=await ctx.resources.graph(),
                keywords=ctx.resources.keywords(),
                scan_limit=ctx.settings.scan_limit,
            )
            return await audit_value(stores, request.text, tenant_id=request.tenant_id, user_id=request.user_id)

        await _reply(msg, audit)

    await nc.subscribe(control_subject(ctx.subjects, "prune"), queue=CONTROL_QUEUE, cb=on_prune)
    await nc.subscribe(control_subject(ctx.subjects, "audit"), queue=CONTROL_QUEUE, cb=on_audit)
    await nc.subscribe(control_subject(ctx.subjects, "audit_value"), queue=CONTROL_QUEUE, cb=on_audit_value)
    await nc.flush()
    return nc
