"""The committed JSON Schemas and AsyncAPI document match the code (regenerate with
`scripts/tiermem schemas export`)."""

from __future__ import annotations

from pathlib import Path

from services.cli.schemas import write_schemas

COMMITTED = Path(__file__).resolve().parents[2] / "contracts" / "schemas"


def test_committed_schemas_match_the_code(tmp_path: Path) -> None:
    fresh = {path.name: path.read_text(encoding="utf-8") for path in write_schemas(tmp_path)}
    committed = {path.name: path.read_text(encoding="utf-8") for path in COMMITTED.glob("*.json")}
    assert set(committed) == set(fresh), "schema files added or removed: run `scripts/tiermem schemas export`"
    drifted = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not drifted, f"schemas drifted from the code: {drifted}; run `scripts/tiermem schemas export`"


def test_every_event_field_is_described() -> None:
    from contracts import EVENT_MODELS

    undocumented = [
        f"{model.__name__}.{name}"
        for model in EVENT_MODELS
        for name, field in model.model_fields.items()
        if not field.description
    ]
    assert undocumented == []
