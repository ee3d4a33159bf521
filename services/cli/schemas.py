"""Exported contracts: one JSON Schema per event and the AsyncAPI document of every service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts import EVENT_MODELS, Subjects
from services.common.runtime.service import PublishedEvent


def event_schemas() -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for model in EVENT_MODELS:
        fields = model.model_fields
        event_type = fields["event_type"].default
        version = fields["schema_version"].default
        schemas[f"{event_type}.v{version}.json"] = model.model_json_schema(mode="validation")
    return schemas


def declared_publications(subjects: Subjects) -> list[PublishedEvent]:
    """Every event of the pipeline with who publishes it: the upstream input, what each consumer
    service declares in its definition, and what the recall API declares."""
    from contracts import SessionCompleted
    from services.cli.stack import all_services
    from services.recall_api.publications import publishes as recall_api_publishes

    upstream = PublishedEvent(
        subjects.all_session_completed(), SessionCompleted, "Upstream chat systems publish finished sessions here."
    )
    declared = [event for definition in all_services() for event in definition.publishes(subjects)]
    return [upstream, *declared, *recall_api_publishes(subjects)]


def asyncapi_document() -> dict[str, Any]:
    """Every service's subscribers plus the events they publish, on one (unconnected) broker."""
    from faststream.specification import AsyncAPI

    from services.cli.stack import all_services
    from services.common.runtime.broker import build_broker
    from services.common.runtime.resources import Resources
    from services.common.runtime.service import build_context
    from services.common.runtime.settings import TierMemSettings

    settings = TierMemSettings.model_validate({})
    subjects = Subjects(settings.nats.subject_root)
    broker = build_broker(settings, "spec")
    resources = Resources(settings)
    for definition in all_services():
        definition.register(broker, build_context(definition.settings_from(settings), broker, resources))
    for event in declared_publications(subjects):
        broker.publisher(
            event.subject, schema=event.model, title=f"publish:{event.subject}", description=event.description
        )
    spec = AsyncAPI(broker, title="tiermem", version="1", description="tiermem event pipeline").to_specification()
    document: dict[str, Any] = json.loads(spec.to_json())
    return document


def write_schemas(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    documents = {**event_schemas(), "asyncapi.json": asyncapi_document()}
    for name, document in documents.items():
        path = out / name
        path.write_text(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written
