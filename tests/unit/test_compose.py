"""infra/compose.yaml is a valid Compose file (the compose-spec JSON schema, vendored: what
`docker compose config` checks first; no Docker on these machines), runs every service from the one
image with the same argv as Kubernetes, sets only real settings, and holds no secret of its own."""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any
from unittest import mock

import jsonschema
import pytest
import yaml

from services.cli.stack import all_services
from services.recall_api.settings import RecallApiSettings
from tests.unit.test_infra import is_real_setting

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "infra" / "compose.yaml"
SCHEMA = ROOT / "tests" / "fixtures" / "schemas" / "compose-spec.json"
# ${NAME}, ${NAME:-default}, ${NAME:?error}: compose's interpolation
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def test_every_service_whose_handlers_call_the_llm_says_so() -> None:
    """`calls_llm` decides whether a root imports litellm before it freezes its start-up heap (root.py);
    a service that calls the model without saying so would import it later, outside the frozen heap."""
    import importlib
    import inspect

    for definition in all_services():
        handlers = inspect.getsource(importlib.import_module(definition.register.__module__))
        assert definition.calls_llm == ("resources.llm()" in handlers), definition.name


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))


def tiermem_services(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in document["services"].items() if "build" in service}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's substitution, enough for this file: `${X:?..}` must be set, `${X:-d}` defaults."""

    def _one(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if operator and operator.endswith("?"):
            raise KeyError(f"{name} is required: {argument}")
        return argument or ""

    return _VARIABLE.sub(_one, value)


def test_compose_file_validates_against_the_compose_spec() -> None:
    errors = list(_validator().iter_errors(compose()))
    assert not errors, "; ".join(f"{list(error.path)}: {error.message}" for error in errors)


def test_the_schema_check_can_fail() -> None:
    broken = copy.deepcopy(compose())
    broken["services"]["nats"]["healthcheck"]["intervall"] = "5s"
    assert list(_validator().iter_errors(broken))


def test_every_service_runs_from_the_one_image_with_the_kubernetes_argv() -> None:
    services = tiermem_services(compose())
    expected = {definition.name: ["serve", definition.name] for definition in all_services()}
    expected |= {"recall-api": ["serve", "recall-api"], "provision": ["provision"]}
    assert {name: service["command"] for name, service in services.items()} == expected
    for name, service in services.items():
        assert service["build"] == {"context": "..", "dockerfile": "infra/Dockerfile"}, name
        assert (ROOT / "infra" / "Dockerfile").is_file()
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"], name
        assert service["cap_drop"] == ["ALL"] and service["user"] == "65532:65532", name
        if name != "provision":
            assert service["depends_on"] == {"provision": {"condition": "service_completed_successfully"}}
    for server in ("nats", "qdrant", "neo4j"):
        assert "healthcheck" in compose()["services"][server], server
        for port in compose()["services"][server]["ports"]:
            assert port.startswith("127.0.0.1:"), f"{server} publishes {port} on loopback only"


def test_the_env_vars_it_sets_are_real_settings_and_parse() -> None:
    """Every TIERMEM_ variable names a setting, and with the required values given the recall API's
    settings load from exactly that environment (e.g. the server backends, the health port)."""
    given = {
        "TIERMEM_NATS_TOKEN": secrets.token_urlsafe(16),
        "QDRANT_API_KEY": secrets.token_urlsafe(16),
        "NEO4J_PASSWORD": secrets.token_urlsafe(16),
        "TIERMEM_API_KEYS": json.dumps({secrets.token_urlsafe(32): "tenant-a"}),
    }
    services = tiermem_services(compose())
    for name, service in services.items():
        for variable in service["environment"]:
            assert is_real_setting(variable), f"{name}: {variable} is not a tiermem setting"
    environment = {key: interpolate(str(value), given) for key, value in services["recall-api"]["environment"].items()}
    with mock.patch.dict(os.environ, environment):
        settings = RecallApiSettings()
    assert settings.vector.backend == "server" and settings.graph.backend == "neo4j"
    assert settings.nats.token is not None and settings.nats.token.get_secret_value() == given["TIERMEM_NATS_TOKEN"]
    assert settings.llm.model is None, "an unset optional variable is unset, not ''"
    assert settings.health_port == 8081 and list(settings.api_keys.values()) == ["tenant-a"]


def test_secrets_are_required_never_defaulted() -> None:
    text = COMPOSE.read_text()
    for secret in ("TIERMEM_NATS_TOKEN", "QDRANT_API_KEY", "NEO4J_PASSWORD", "TIERMEM_API_KEYS"):
        uses = [match for match in _VARIABLE.finditer(text) if match.group(1) == secret]
        assert uses, secret
        defaults = [match.group(0) for match in uses if match.group(2) and match.group(2).endswith("-")]
        assert not defaults, f"{secret} must not have a default: {defaults}"
    with pytest.raises(KeyError, match="TIERMEM_API_KEYS"):
        interpolate(str(tiermem_services(compose())["recall-api"]["environment"]["TIERMEM_API_KEYS"]), {})
    example = (ROOT / "infra" / "compose.env.example").read_text()
    filled = [line for line in example.splitlines() if line and not line.startswith("#") and line.split("=", 1)[1]]
    assert not filled, f"the example holds no values: {filled}"
