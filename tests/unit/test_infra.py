"""The Kubernetes manifests match the code: one Deployment per service started by its own
command, and every KEDA lag trigger names a stream and durable consumer the code provisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from contracts import Subjects
from services.cli.stack import all_services

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"


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


def test_settings_in_the_config_map_are_real_settings() -> None:
    from services.common.runtime.settings import TierMemSettings

    config = next(d for d in _documents() if d["kind"] == "ConfigMap")
    for key in config["data"]:
        assert key.startswith("TIERMEM_")
        top = key.removeprefix("TIERMEM_").split("__")[0].lower()
        assert top in TierMemSettings.model_fields, key
