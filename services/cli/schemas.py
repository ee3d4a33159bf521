"""Exported contracts: one JSON Schema per event and the AsyncAPI document of every service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts import EVENT_MODELS, Subjects


def event_schemas() -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for model in EVENT_MODELS:
        fields = model.model_fields
        event_type = fields["event_type"].default
        version = fields["schema_version"].default
        schemas[f"{event_type}.v{version}.json"] = model.model_json_schema(mode="validation")
    return schemas


def asyncapi_document() -> dict[str, Any]:
    """Every service's subscribers plus the events they publish, on one (unconnected) broker."""
    from faststream.specification import AsyncAPI

    from contracts import EntityMerged, EntityUpserted, EpisodeCreated, ErasureCompleted, ErasureRequested
    from contracts import SessionCompleted as Session
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
    documented: list[tuple[str, type[Any], str]] = [
        (subjects.all_session_completed(), Session, "Upstream chat systems publish finished sessions here."),
        (subjects.all_of("episode.created"), EpisodeCreated, "episodic-summarizer: an episode was stored."),
        (subjects.all_of("entity.upserted"), EntityUpserted, "semantic-extractor: an entity changed."),
        (subjects.all_of("entity.merged"), EntityMerged, "dedup: duplicate entities were merged."),
        (subjects.all_of("erasure.requested"), ErasureRequested, "recall-api: a user asked to be forgotten."),
        (subjects.all_of("erasure.completed"), ErasureCompleted, "pruner: an erasure finished."),
    ]
    for subject, model, description in documented:
        broker.publisher(subject, schema=model, title=f"publish:{subject}", description=description)
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
