"""Every kustomize overlay renders (`kubectl kustomize`, the kustomize built into kubectl), with and
without the optional components, and the output is what a cluster with the restricted Pod Security
profile, KEDA, External Secrets and prometheus-operator accepts: each object validates strictly
(unknown fields are errors) against the Kubernetes schemas (`kubernetes-validate`) and the vendored
KEDA / External Secrets / prometheus-operator CRD schemas, all offline. A policy
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
from services.common.runtime.settings import LlmSettings, TierMemSettings
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
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}
# Overlays with the optional components added, as an operator lists them in `components:`.
WITH_COMPONENTS = (
    ("prod", ("prometheus-operator",)),
    ("prod-external-secrets", ("external-secrets-llm-key", "prometheus-operator")),
)
WORKLOADS = {"Deployment", "Job"}


def _secrets_env() -> str:
    """What an operator writes into an overlay's git-ignored secrets.env."""
    api_keys = json.dumps({secrets.token_urlsafe(32): "tenant-a"})
    return f"TIERMEM_API_KEYS={api_keys}\nTIERMEM_NATS__TOKEN={secrets.token_urlsafe(24)}\n"


@cache
def rendered(overlay: str, components: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize` of an overlay; with `components`, of an overlay that adds those components
    to it (infra/k8s/components/NAME), in the namespace the overlay sets."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl (with its built-in kustomize) is needed to render the overlays"
    with _copy_of_k8s() as k8s:
        for example in (k8s / "overlays").glob("*/secrets.env.example"):
            example.with_name("secrets.env").write_text(_secrets_env())
        target = k8s / "overlays" / overlay
        if components:
            namespace = yaml.safe_load((target / "kustomization.yaml").read_text())["namespace"]
            target = k8s / "overlays" / "with-components"
            target.mkdir()
            wrapper = {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": namespace,
                "resources": [f"../{overlay}"],
                "components": [f"../../components/{name}" for name in components],
            }
            (target / "kustomization.yaml").write_text(yaml.safe_dump(wrapper))
        result = subprocess.run([kubectl, "kustomize", str(target)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {overlay} {components} failed:\n{result.stderr}"
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


def validate_strictly(documents: tuple[dict[str, Any], ...], overlay: str) -> None:
    """Each object against its Kubernetes schema (both versions we claim) or its vendored CRD schema."""
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_against_kubernetes_and_crd_schemas(overlay: str) -> None:
    documents = rendered(overlay)
    kinds = {doc["kind"] for doc in documents}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Deployment", "Job", "ScaledObject"} <= kinds
    assert {"HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Service"} <= kinds
    assert {"Secret", "ExternalSecret"} & kinds, f"{overlay}: the Secret comes from a file or from ESO"
    validate_strictly(documents, overlay)


@pytest.mark.parametrize(("overlay", "components"), WITH_COMPONENTS)
def test_overlay_with_the_optional_components_validates(overlay: str, components: tuple[str, ...]) -> None:
    documents = rendered(overlay, components)
    assert len(documents) > len(rendered(overlay)), f"{components} add objects to {overlay}"
    validate_strictly(documents, f"{overlay}+{'+'.join(components)}")
    namespaces = {doc["metadata"].get("namespace") for doc in documents if doc["kind"] != "Namespace"}
    assert namespaces == {"tiermem"}, "every object lands in the overlay's namespace"


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


def _example_keys(overlay: str) -> dict[str, str]:
    example = (K8S / "overlays" / overlay / "secrets.env.example").read_text()
    return dict(line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#"))


def _external_secret_keys(documents: tuple[dict[str, Any], ...]) -> set[str]:
    (external,) = [doc for doc in documents if doc["kind"] == "ExternalSecret"]
    return {item["secretKey"] for item in external["spec"]["data"]}


LLM_KEY = "TIERMEM_LLM__API_KEY"


def test_the_secret_files_and_the_external_secret_name_the_same_keys() -> None:
    dev, prod = _example_keys("dev"), _example_keys("prod")
    assert dev == prod and not any(dev.values()), "empty examples with one set of keys"
    with_llm = _external_secret_keys(rendered("prod-external-secrets", ("external-secrets-llm-key",)))
    assert set(dev) == with_llm
    assert is_placeholder_key("set-me-a-long-random-key"), "the old shipped key is refused at start-up"


def test_the_external_secret_does_not_require_an_llm_key() -> None:
    """ESO fails the whole sync when one remote key is missing: the LLM key (none offline, none for a
    local model server) is asked for only when the llm-key component is added."""
    required = _external_secret_keys(rendered("prod-external-secrets"))
    assert LLM_KEY not in required
    assert {"TIERMEM_API_KEYS", "TIERMEM_NATS__TOKEN", "TIERMEM_VECTOR__API_KEY"} <= required
    assert LlmSettings().api_key is None and LlmSettings().model is None, "offline: no model, no key"
    assert LLM_KEY in _external_secret_keys(rendered("prod-external-secrets", ("external-secrets-llm-key",)))


def test_the_store_example_is_the_store_the_external_secret_reads() -> None:
    store = yaml.safe_load((K8S / "components" / "external-secrets" / "clustersecretstore.example.yaml").read_text())
    (external,) = [doc for doc in rendered("prod-external-secrets") if doc["kind"] == "ExternalSecret"]
    assert store["apiVersion"] == external["apiVersion"]
    assert {"kind": store["kind"], "name": store["metadata"]["name"]} == external["spec"]["secretStoreRef"]
    (condition,) = store["spec"]["conditions"]
    assert condition["namespaces"] == [external["metadata"]["namespace"]], "only tiermem's namespace reads it"


def _without_secret_source(documents: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The objects minus the Secret or ExternalSecret, with generated Secret names (name-hash) unhashed."""
    generated = {doc["metadata"]["name"] for doc in documents if doc["kind"] == "Secret"}
    text = yaml.safe_dump_all([doc for doc in documents if doc["kind"] not in ("Secret", "ExternalSecret")])
    for name in generated:
        text = text.replace(name, name.rsplit("-", 1)[0])
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_the_two_production_overlays_differ_only_in_the_secret_source() -> None:
    plain, synced = rendered("prod"), rendered("prod-external-secrets")
    assert _without_secret_source(plain) == _without_secret_source(synced)
    assert [doc["kind"] for doc in plain if doc["kind"] in ("Secret", "ExternalSecret")] == ["Secret"]
    assert [doc["kind"] for doc in synced if doc["kind"] in ("Secret", "ExternalSecret")] == ["ExternalSecret"]


def test_the_prometheus_rule_carries_the_alert_rules_unchanged() -> None:
    """components/prometheus-operator/prometheusrule.yaml is generated from
    infra/observability/prometheus-alerts.yaml: the same groups, rule for rule."""
    alerts = yaml.safe_load((ROOT / "infra" / "observability" / "prometheus-alerts.yaml").read_text())
    (rule,) = [doc for doc in rendered("prod", ("prometheus-operator",)) if doc["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == alerts["groups"]


def test_the_monitors_select_the_ports_that_serve_metrics() -> None:
    documents = rendered("prod", ("prometheus-operator",))
    (service_monitor,) = [doc for doc in documents if doc["kind"] == "ServiceMonitor"]
    (pod_monitor,) = [doc for doc in documents if doc["kind"] == "PodMonitor"]
    (service,) = [doc for doc in documents if doc["kind"] == "Service"]
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in service_monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    selector = pod_monitor["spec"]["selector"]["matchLabels"].items()
    consumers = [doc for doc in documents if doc["kind"] == "Deployment" and "consumer" in json.dumps(doc)]
    selected = [doc for doc in consumers if selector <= doc["spec"]["template"]["metadata"]["labels"].items()]
    assert {doc["metadata"]["name"] for doc in selected} == {f"tiermem-{d.name}" for d in all_services()}
    for doc in selected:
        (container,) = _containers(doc)
        assert {"health"} == {e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]}
        assert "health" in {port["name"] for port in container["ports"]}
        assert {e["path"] for e in pod_monitor["spec"]["podMetricsEndpoints"]} == {"/metrics"}


def _egress_ports(policy: dict[str, Any]) -> set[int]:
    return {port["port"] for rule in policy["spec"].get("egress", []) for port in rule.get("ports", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_may_send_traces_to_an_otlp_collector(overlay: str) -> None:
    """OTLP/HTTP (4318) egress for every tiermem pod, to a collector inside the cluster."""
    documents = rendered(overlay)
    policies = [doc for doc in documents if doc["kind"] == "NetworkPolicy"]
    otlp = [policy for policy in policies if 4318 in _egress_ports(policy)]
    assert otlp, f"{overlay}: no NetworkPolicy lets a pod reach an OTLP collector on 4318"
    for policy in otlp:
        for rule in policy["spec"]["egress"]:
            assert all("namespaceSelector" in peer for peer in rule["to"]), "in-cluster collectors only"
    workloads = [doc for doc in documents if doc["kind"] in WORKLOADS]
    for doc in workloads:
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert any(policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items() for policy in otlp), (
            f"{overlay}: {doc['metadata']['name']} cannot export traces"
        )


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
