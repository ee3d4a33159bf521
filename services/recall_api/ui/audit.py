"""The erasure page's audit: every remaining trace of a user, asked of the running pruner (it owns
the stores), else counted here, exactly like `tiermem audit user`."""

from __future__ import annotations

from services.common.domain.owner import Owner
from services.common.stores.erasure import AuditReport, AuditRequest, audit_user, request_control
from services.recall_api.service import RecallService

AUDIT_TIMEOUT_S = 10.0


async def audit_owner(service: RecallService, owner: Owner) -> AuditReport:
    client = await service.nats()
    request = AuditRequest(tenant_id=owner.tenant_id, user_id=owner.user_id)
    answered = await request_control(client, service.subjects, "audit", request, AUDIT_TIMEOUT_S)
    if answered is not None:
        return AuditReport.model_validate(answered)
    return await audit_user(
        index=await service.resources.vector_index(),
        graph=await service.resources.graph(),
        js=client.jetstream(),
        subjects=service.subjects,
        owner=owner,
    )
