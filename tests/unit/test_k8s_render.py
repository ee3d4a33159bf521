"""Every kustomize overlay renders (`kubectl kustomize`, the kustomize built into kubectl), and the
output is what a cluster with the restricted Pod Security profile, KEDA and External Secrets
accepts: each object validates strictly (unknown fields are errors) against the Kubernetes schemas
(`kubernetes-validate`) and the vendored KEDA / External Secrets CRD schemas, all offline. A policy
check then asserts what the schemas cannot: the restricted profile's fields, probes, no placeholder
secrets, no `replicas` where an autoscaler owns the count, a grace period longer than the broker's."""

from __future__ import annotations

import copy
import json
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from services.cli.stack import all_services
from services.common.runtime.broker import build_broker
from services.common.runtime.settings import TierMemSettings
from services.recall_api.auth import is_placeholder_key

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
SCHEMAS = ROOT / "tests" / "fixtures" / "schemas"
OVERLAYS = sorted(path.name for path in (K8S / "overlays").iterdir() if (path / "kustomization.yaml").exists())
# The oldest Kubernetes minor we claim (PodSecurity admission, autoscaling/v2, policy/v1) and the newest schema.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
CRDS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("external-secrets.io/v1", "ExternalSecret"): "external-secrets.io_externalsecrets.yaml",
}
WORKLOADS = {"Deployment", "Job"}


def _dev_secrets_env() -> str:
    """What an operator writes into the dev overlay's git-ignored secrets.env."""
    api_keys = json.dumps({secrets.token_urlsafe(32): "tenant-a"})
    return f"TIERMEM_API_KEYS={api_keys}\nTIERMEM_NATS__TOKEN={secrets.token_urlsafe(24)}\n"


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl (with its built-in kustomize) is needed to render the overlays"
    with _copy_of_k8s() as k8s:
        if overlay == "dev":
            (k8s / "overlays" / "dev" / "secrets.env").write_text(_dev_secrets_env())
        result = subprocess.run(
            [kubectl, "kustomize", str(k8s / "overlays" / overlay)], capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 0, f"kubectl kustomize {overlay} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


class _copy_of_k8s:
    """infra/k8s copied to a scratch dir (the dev overlay's secrets.env is written there, never into the tree)."""

    def __enter__(self) -> Path:
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        target = Path(self._dir.name) / "k8s"
        shutil.copytree(K8S, target, ignore=shutil.ignore_patterns("secrets.env"))
        return target

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()


def _strict(schema: Any) -> Any:
    """A CRD's structural schema with unknown fields rejected, as the API server prunes/rejects them."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    group, version = api_version.split("/")
    documents = [doc for doc in yaml.safe_load_all((SCHEMAS / CRDS[(api_version, kind)]).read_text()) if doc]
    (crd,) = documents
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    schema = _strict(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
    # metadata is validated by the API server itself, not by the CRD's schema
    schema["properties"]["metadata"] = {"type": "object"}
    return schema  # type: ignore[no-any-return]


def _containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from doc["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_against_kubernetes_and_crd_schemas(overlay: str) -> None:
    documents = rendered(overlay)
    kinds = {doc["kind"] for doc in documents}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Deployment", "Job", "ScaledObject"} <= kinds
    assert {"HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Service"} <= kinds
    for doc in documents:
        key = (doc["apiVersion"], doc["kind"])
        where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}"
        if key in CRDS:
            errors = list(jsonschema.Draft7Validator(crd_schema(*key)).iter_errors(doc))
            assert not errors, f"{where}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{where} (Kubernetes {version}): {list(exc.path)}: {exc.message}") from exc


def test_the_strict_checks_can_fail() -> None:
    """A misspelt field is an error (the checks are strict, not merely parseable)."""
    deployment = copy.deepcopy(next(doc for doc in rendered("prod") if doc["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    scaled = next(doc for doc in rendered("prod") if doc["kind"] == "ScaledObject")
    broken = copy.deepcopy(scaled)
    broken["spec"]["maxReplicas"] = broken["spec"].pop("maxReplicaCount")
    assert list(jsonschema.Draft7Validator(crd_schema("keda.sh/v1alpha1", "ScaledObject")).iter_errors(broken))
    assert not list(jsonschema.Draft7Validator(crd_schema("keda.sh/v1alpha1", "ScaledObject")).iter_errors(scaled))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_restricted_pod_security_on_every_workload(overlay: str) -> None:
    documents = rendered(overlay)
    (namespace,) = [doc for doc in documents if doc["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    workloads = [doc for doc in documents if doc["kind"] in WORKLOADS]
    assert workloads
    for doc in workloads:
        where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}"
        pod = doc["spec"]["template"]["spec"]
        assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], where
        assert pod["serviceAccountName"] == "tiermem" and pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        mounted = set()
        for container in _containers(doc):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"], where
            assert ":" in container["image"] or "@sha256:" in container["image"], f"{where}: the overlay sets the tag"
            assert not container["image"].endswith(":latest"), where
            mounted |= {mount["mountPath"] for mount in container.get("volumeMounts", [])}
        assert "/tmp" in mounted, f"{where}: a read-only root needs a writable /tmp"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_grace_and_autoscaler_ownership(overlay: str) -> None:
    documents = rendered(overlay)
    graceful_timeout = build_broker(TierMemSettings(), "policy").config.graceful_timeout
    assert graceful_timeout is not None
    scaled = {doc["spec"]["scaleTargetRef"]["name"] for doc in documents if doc["kind"] == "ScaledObject"}
    scaled |= {doc["spec"]["scaleTargetRef"]["name"] for doc in documents if doc["kind"] == "HorizontalPodAutoscaler"}
    deployments = [doc for doc in documents if doc["kind"] == "Deployment"]
    for doc in deployments:
        name = doc["metadata"]["name"]
        pod = doc["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > graceful_timeout, name
        (container,) = _containers(doc)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["path"] in ("/healthz", "/readyz"), f"{name}: {probe}"
        port_name = container["readinessProbe"]["httpGet"]["port"]
        assert port_name in {port["name"] for port in container["ports"]}, name
        if name in scaled:
            assert "replicas" not in doc["spec"], f"{name}: an autoscaler owns the count"
    assert {f"tiermem-{d.name}" for d in all_services() if d.name != "pruner"} | {"tiermem-recall-api"} <= scaled
    budgets = {doc["metadata"]["name"]: doc["spec"] for doc in documents if doc["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == {doc["metadata"]["name"] for doc in deployments}
    for name, budget in budgets.items():
        assert budget == {"maxUnavailable": 1, "selector": budget["selector"]}, f"{name}: a drain is never blocked"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_placeholder_secrets_and_every_secret_ref_resolves(overlay: str) -> None:
    documents = rendered(overlay)
    secret_names = {doc["metadata"]["name"] for doc in documents if doc["kind"] == "Secret"}
    secret_names |= {doc["spec"]["target"]["name"] for doc in documents if doc["kind"] == "ExternalSecret"}
    for doc in documents:
        if doc["kind"] == "Secret":
            for key, value in (doc.get("stringData") or {}).items():
                assert value and "set-me" not in value, f"{overlay}: placeholder in Secret key {key}"
        if doc["kind"] in WORKLOADS:
            for container in _containers(doc):
                refs = [ref["secretRef"]["name"] for ref in container["envFrom"] if "secretRef" in ref]
                assert refs and set(refs) <= secret_names, f"{overlay}: {doc['metadata']['name']} reads {refs}"
    text = yaml.safe_dump_all(documents)
    for marker in ("set-me", "changeme", "change-me"):
        assert marker not in text.casefold(), f"{overlay}: {marker!r} in the rendered manifests"


def test_dev_secret_env_keys_match_the_prod_external_secret() -> None:
    example = (K8S / "overlays" / "dev" / "secrets.env.example").read_text()
    dev_keys = {line.split("=", 1)[0] for line in example.splitlines() if line and not line.startswith("#")}
    (external,) = [doc for doc in rendered("prod") if doc["kind"] == "ExternalSecret"]
    assert dev_keys == {item["secretKey"] for item in external["spec"]["data"]}
    assert all(not line.split("=", 1)[1] for line in example.splitlines() if line and not line.startswith("#"))
    assert is_placeholder_key("set-me-a-long-random-key"), "the old shipped key is refused at start-up"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_reads_the_headless_monitoring_service_and_mcp_accepts_the_service_host(overlay: str) -> None:
    documents = rendered(overlay)
    for doc in documents:
        if doc["kind"] == "ScaledObject":
            (trigger,) = doc["spec"]["triggers"]
            host, _, port = trigger["metadata"]["natsServerMonitoringEndpoint"].partition(":")
            assert host.split(".")[0].endswith("-headless") and port == "8222", "each node, through the headless svc"
            assert doc["spec"]["minReplicaCount"] >= 1 and doc["spec"]["cooldownPeriod"] > 0
    (config,) = [doc for doc in documents if doc["kind"] == "ConfigMap"]
    (service,) = [doc for doc in documents if doc["kind"] == "Service"]
    allowed = json.loads(config["data"]["TIERMEM_MCP_ALLOWED_HOSTS"])
    fqdn = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert {service["metadata"]["name"], fqdn} <= set(allowed)


def test_documented_installs_match_what_the_manifests_expect() -> None:
    """The values files install what the ConfigMap and the ScaledObjects point at: NATS release `nats`
    in namespace `nats` (client 4222, headless monitoring 8222, JetStream on files, 3 nodes),
    Qdrant `qdrant` and Neo4j `neo4j` (Community 5) in their namespaces."""
    values = {path.stem: yaml.safe_load(path.read_text()) for path in (K8S / "values").glob("*.yaml")}
    assert set(values) == {"nats", "qdrant", "neo4j", "keda"}
    nats = values["nats"]["config"]
    assert nats["cluster"] == {"enabled": True, "replicas": 3}
    assert nats["jetstream"]["enabled"] and nats["jetstream"]["fileStore"]["enabled"]
    assert nats["monitor"] == {"enabled": True, "port": 8222}
    assert values["neo4j"]["neo4j"]["edition"] == "community"
    documents = rendered("prod")
    (config,) = [doc for doc in documents if doc["kind"] == "ConfigMap"]
    assert config["data"]["TIERMEM_NATS__URL"] == "nats://nats.nats.svc.cluster.local:4222"
    assert config["data"]["TIERMEM_NATS__REPLICAS"] == str(nats["cluster"]["replicas"])
    assert config["data"]["TIERMEM_VECTOR__URL"].startswith("http://qdrant.qdrant.svc")
    assert config["data"]["TIERMEM_GRAPH__NEO4J_URI"].startswith("neo4j://neo4j.neo4j.svc")
    for doc in documents:
        if doc["kind"] == "ScaledObject":
            endpoint = doc["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"]
            assert endpoint == f"nats-headless.nats.svc.cluster.local:{nats['monitor']['port']}"


def test_mcp_answers_the_in_cluster_host_names_and_refuses_others(tmp_path: Path) -> None:
    """The recall API built with the rendered ConfigMap's allowed hosts: an agent in the cluster
    reaching the Service by any of its DNS names gets MCP, not 421; DNS rebinding is still refused."""
    from starlette.testclient import TestClient

    from services.recall_api.app import create_app
    from services.recall_api.settings import RecallApiSettings

    documents = rendered("prod")
    (config,) = [doc for doc in documents if doc["kind"] == "ConfigMap"]
    (service,) = [doc for doc in documents if doc["kind"] == "Service"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    key = secrets.token_urlsafe(32)
    allowed = json.loads(config["data"]["TIERMEM_MCP_ALLOWED_HOSTS"])
    settings = RecallApiSettings(api_keys={key: "tenant-a"}, data_dir=tmp_path, mcp_allowed_hosts=allowed)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "k8s", "version": "1"}},
    }
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    in_cluster = (name, f"{name}.{namespace}", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}.svc:80")
    with TestClient(create_app(settings)) as client:
        for host in in_cluster:
            response = client.post(settings.mcp_path, json=initialize, headers={**headers, "Host": host})
            assert response.status_code == 200, f"{host}: {response.status_code} {response.text[:200]}"
        refused = client.post(settings.mcp_path, json=initialize, headers={**headers, "Host": "rebound.example.com"})
        assert refused.status_code == 421
