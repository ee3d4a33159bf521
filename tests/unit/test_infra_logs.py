"""The deployed shapes log JSON (issue 15): every container of every rendered kustomize overlay and
every tiermem service of infra/compose.yaml gets `TIERMEM_LOG_FORMAT=json`, and the settings loaded
from exactly that environment say so (with memory and model text left redacted)."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any
from unittest import mock

import pytest

from services.common.runtime.settings import TierMemSettings
from tests.unit.test_compose import compose, interpolate, tiermem_services
from tests.unit.test_k8s_render import OVERLAYS, rendered


def _settings_from(environment: dict[str, str]) -> TierMemSettings:
    with mock.patch.dict(os.environ, environment, clear=True):
        return TierMemSettings()


def _container_environment(container: dict[str, Any], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            environment.update(config_maps[source["configMapRef"]["name"]])
    environment.update({item["name"]: item["value"] for item in container.get("env", []) if "value" in item})
    return environment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_kubernetes_container_logs_json(overlay: str) -> None:
    documents = rendered(overlay)
    config_maps = {doc["metadata"]["name"]: doc.get("data", {}) for doc in documents if doc["kind"] == "ConfigMap"}
    containers = [
        (doc["metadata"]["name"], container)
        for doc in documents
        if doc["kind"] in ("Deployment", "Job")
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert containers, "the overlay renders workloads"
    for name, container in containers:
        settings = _settings_from(_container_environment(container, config_maps))
        assert settings.log_format == "json", f"{overlay}: {name} does not log JSON"
        assert settings.log_content is False, f"{overlay}: {name} logs memory text"


def test_every_compose_service_logs_json_unless_the_env_file_says_text() -> None:
    required = {
        "TIERMEM_NATS_TOKEN": secrets.token_urlsafe(16),
        "QDRANT_API_KEY": secrets.token_urlsafe(16),
        "NEO4J_PASSWORD": secrets.token_urlsafe(16),
        "TIERMEM_API_KEYS": json.dumps({secrets.token_urlsafe(32): "tenant-a"}),
    }
    services = tiermem_services(compose())
    assert services, "compose runs tiermem services"
    for name, service in services.items():
        for given, expected in ((required, "json"), ({**required, "TIERMEM_LOG_FORMAT": "text"}, "text")):
            environment = {key: interpolate(str(value), given) for key, value in service["environment"].items()}
            settings = _settings_from(environment)
            assert settings.log_format == expected, f"{name} logs {settings.log_format}"
            assert settings.log_content is False
