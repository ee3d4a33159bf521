"""docs/configuration.md is generated from the settings models and matches them (regenerate with
`scripts/tiermem schemas config-docs`), and every setting says what it does."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from services.cli.config_docs import configuration_markdown, service_settings

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REGENERATE = "run `scripts/tiermem schemas config-docs`"


def test_configuration_page_matches_the_settings_models() -> None:
    committed = COMMITTED.read_text(encoding="utf-8")
    assert configuration_markdown() == committed, f"docs/configuration.md drifted from the settings: {REGENERATE}"


def test_every_setting_is_described() -> None:
    from services.common.runtime.settings import TierMemSettings

    models: list[type[BaseModel]] = [TierMemSettings, *(settings for _, settings in service_settings())]
    models += [
        field.annotation
        for field in TierMemSettings.model_fields.values()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    ]
    undescribed = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if not field.description
        and not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel))
    ]
    assert undescribed == []


def test_a_setting_added_to_a_model_shows_on_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page is built from the models, not from a list kept beside them."""
    from pydantic import Field

    import services.cli.config_docs as config_docs
    from services.pruner.settings import PrunerSettings

    class WithOneMore(PrunerSettings):
        brand_new_knob: int = Field(default=7, description="A knob only this test knows.")

    services = [(name, WithOneMore if name == "pruner" else settings) for name, settings in service_settings()]
    monkeypatch.setattr(config_docs, "service_settings", lambda: services)
    assert "| `TIERMEM_BRAND_NEW_KNOB` | int | `7` | A knob only this test knows. |" in configuration_markdown()
