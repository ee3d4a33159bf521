"""The values files for the third-party charts (infra/k8s/values/, with values/dev/ given after them
as `helm -f values/X.yaml -f values/dev/X.yaml` does) keep every store inside the cluster, and the
dev path fits a laptop cluster (kind, minikube): the stores, KEDA, metrics-server and the dev overlay
together request at most 4 GiB of memory. The deploy page's commands name files that exist."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.unit.test_k8s_render import K8S, ROOT, rendered

VALUES = K8S / "values"
CHARTS = ("nats", "qdrant", "neo4j", "keda")
LAPTOP_REQUESTS = 4 * 1024**3
EXTERNAL_SERVICE_TYPES = {"LoadBalancer", "NodePort"}
# Services a chart creates outside the cluster unless its values turn them off (from each chart's
# values.yaml). neo4j/helm-charts: `services.neo4j` is "A LoadBalancer Service for external Neo4j driver
# applications and Neo4j Browser", enabled by default with `spec.type: LoadBalancer`.
EXTERNAL_BY_DEFAULT = {"neo4j": [("services", "neo4j")]}
# kubernetes-sigs/metrics-server's components.yaml (and the minikube addon) request 200Mi.
METRICS_SERVER_REQUEST = 200 * 1024**2
# kedacore/charts keda/values.yaml: each of its three pods requests 100Mi unless set.
KEDA_DEFAULT_REQUEST = "100Mi"
UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "k": 1000, "M": 1000**2, "G": 1000**3, "": 1}


def merged(base: Any, override: Any) -> Any:
    """Helm's rule for `-f a.yaml -f b.yaml`: maps merge key by key; anything else (lists too) is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        result = dict(base)
        for key, value in override.items():
            result[key] = merged(base.get(key), value) if key in base else value
        return result
    return override


def chart_values(chart: str, dev: bool) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((VALUES / f"{chart}.yaml").read_text())
    if dev:
        values = merged(values, yaml.safe_load((VALUES / "dev" / f"{chart}.yaml").read_text()))
    return values


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, str(key)), value
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, (*path, str(index)))


def exposures(chart: str, values: dict[str, Any]) -> list[str]:
    """Everything in a chart's values that makes a store reachable from outside the cluster."""
    found = []
    for path, value in _walk(values):
        where = ".".join(path)
        if path[-1] == "type" and value in EXTERNAL_SERVICE_TYPES:
            found.append(f"{where}: {value}")
        elif path[-1] == "ingress" and isinstance(value, dict) and value.get("enabled"):
            found.append(f"{where}: enabled")
        elif path[-1] in ("externalAccess", "hostNetwork") and value is True:
            found.append(f"{where}: true")
    for service_path in EXTERNAL_BY_DEFAULT.get(chart, []):
        service: dict[str, Any] = values
        for key in service_path:
            service = service.get(key) or {}
        service_type = (service.get("spec") or {}).get("type", "LoadBalancer")
        if service.get("enabled", True) and service_type != "ClusterIP":
            found.append(f"{'.'.join(service_path)}: a {service_type} Service unless `enabled: false`")
    return found


@pytest.mark.parametrize("dev", [False, True], ids=["prod", "dev"])
@pytest.mark.parametrize("chart", CHARTS)
def test_no_values_file_exposes_a_store_outside_the_cluster(chart: str, dev: bool) -> None:
    assert exposures(chart, chart_values(chart, dev)) == []


def test_the_exposure_check_can_fail() -> None:
    neo4j = chart_values("neo4j", dev=False)
    assert exposures("neo4j", merged(neo4j, {"services": {"neo4j": {"enabled": True}}}))
    assert exposures("neo4j", {"edition": "community"}), "the chart's default is a LoadBalancer"
    assert not exposures("neo4j", {"services": {"neo4j": {"enabled": True, "spec": {"type": "ClusterIP"}}}})
    assert exposures("qdrant", merged(chart_values("qdrant", dev=True), {"service": {"type": "LoadBalancer"}}))
    assert exposures("nats", {"service": {"merge": {"spec": {"type": "NodePort"}}}})
    assert exposures("qdrant", {"ingress": {"enabled": True}})


def memory_bytes(quantity: str | int) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G|)", str(quantity))
    assert match, f"unreadable memory quantity {quantity!r}"
    return int(float(match.group(1)) * UNITS[match.group(2)])


def _requests(resources: dict[str, Any], where: str) -> int:
    requests = resources.get("requests") or {}
    assert "memory" in requests, f"{where}: set a memory request (a chart default may be far larger)"
    return memory_bytes(requests["memory"])


def chart_requests(chart: str, values: dict[str, Any]) -> dict[str, int]:
    """Memory requested by a chart's pods, from where each chart reads them, times its replicas."""
    if chart == "nats":
        cluster = values["config"]["cluster"]
        replicas = cluster.get("replicas", 3) if cluster.get("enabled") else 1
        return {"nats": replicas * _requests(values["container"]["resources"], "nats container.resources")}
    if chart == "qdrant":
        return {"qdrant": values.get("replicaCount", 1) * _requests(values["resources"], "qdrant resources")}
    if chart == "neo4j":
        # The chart copies neo4j.resources.{cpu,memory} into the requests unless requests are given.
        resources = values["neo4j"]["resources"]
        return {"neo4j": _requests(resources if "requests" in resources else {"requests": resources}, "neo4j")}
    pods = ("operator", "metricServer", "webhooks")
    resources = values.get("resources") or {}
    return {
        f"keda-{pod}": memory_bytes(
            ((resources.get(pod) or {}).get("requests") or {}).get("memory", KEDA_DEFAULT_REQUEST)
        )
        for pod in pods
    }


def overlay_requests(overlay: str) -> dict[str, int]:
    """Memory the overlay's pods request with each autoscaler at its minimum (the Job's one pod too)."""
    documents = rendered(overlay)
    minimum = {
        doc["spec"]["scaleTargetRef"]["name"]: doc["spec"]["minReplicaCount"]
        for doc in documents
        if doc["kind"] == "ScaledObject"
    }
    minimum |= {
        doc["spec"]["scaleTargetRef"]["name"]: doc["spec"]["minReplicas"]
        for doc in documents
        if doc["kind"] == "HorizontalPodAutoscaler"
    }
    found = {}
    for doc in documents:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        name = doc["metadata"]["name"]
        replicas = minimum.get(name, doc["spec"].get("replicas", 1))
        containers = doc["spec"]["template"]["spec"]["containers"]
        found[name] = replicas * sum(_requests(container["resources"], name) for container in containers)
    return found


def path_requests(dev: bool) -> dict[str, int]:
    total = {"metrics-server": METRICS_SERVER_REQUEST}
    for chart in CHARTS:
        total |= chart_requests(chart, chart_values(chart, dev))
    return total | overlay_requests("dev" if dev else "prod")


def _report(requests: dict[str, int]) -> str:
    return ", ".join(f"{name} {size / 1024**2:.0f}Mi" for name, size in sorted(requests.items()))


def test_the_dev_path_fits_a_laptop_cluster() -> None:
    dev = path_requests(dev=True)
    assert {"nats", "qdrant", "neo4j", "tiermem-recall-api", "tiermem-provision"} <= set(dev)
    assert sum(dev.values()) <= LAPTOP_REQUESTS, f"{sum(dev.values()) / 1024**3:.2f} GiB: {_report(dev)}"


def test_the_request_sum_sees_production_sizes() -> None:
    """The same count over the production path is far above a laptop: the sum reads real numbers."""
    prod = path_requests(dev=False)
    assert sum(prod.values()) > 3 * LAPTOP_REQUESTS, _report(prod)
    assert memory_bytes("1536Mi") == 1536 * 1024**2 and memory_bytes("2G") == 2 * 1000**3


def _deploy_page_commands() -> str:
    page = (ROOT / "docs" / "deploy.md").read_text()
    return "\n".join(re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL))


def test_the_deploy_page_commands_name_real_files_and_install_what_the_manifests_need() -> None:
    commands = _deploy_page_commands()
    paths = set(re.findall(r"\binfra/[\w./-]+", commands))
    assert paths, "the deploy page gives the commands"
    written = set(re.findall(r"(?:\bcp \S+ |> )(infra/\S+)", commands))  # what the operator writes (git-ignored)
    missing = [path for path in sorted(paths - written) if not (ROOT / path).exists()]
    assert not missing, f"the deploy page names files that do not exist: {missing}"
    applied = set(re.findall(r"kubectl apply -k infra/k8s/overlays/([\w-]+)", commands))
    assert applied == {path.name for path in (K8S / "overlays").iterdir()}, "every overlay has its commands"
    for chart in CHARTS:
        assert f"-f infra/k8s/values/dev/{chart}.yaml" in commands, f"the dev path installs {chart} laptop-sized"
    for needed in ("metrics-server", "kedacore/keda", "external-secrets/external-secrets", "kube-prometheus-stack"):
        assert needed in commands, f"the deploy page installs {needed}"
    assert "clustersecretstore.example.yaml" in commands


def test_every_dev_values_file_layers_on_a_production_one() -> None:
    dev = {path.stem for path in (VALUES / "dev").glob("*.yaml")}
    assert dev == set(CHARTS) == {path.stem for path in VALUES.glob("*.yaml")}
