"""The Grafana dashboard and the Prometheus alert rules under infra/observability/ (issue 15):
well-formed, and every series they query is one tiermem really exports (read from the live
instruments, so renaming a metric without updating the dashboard fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry

import services.common.gateways.instruments
import services.common.runtime.instruments
import services.recall_api.http.telemetry  # noqa: F401  (registers the HTTP instruments)
from services.common.runtime.broker import build_broker
from services.common.runtime.health import ConsumerHealth
from services.common.runtime.resources import Resources
from services.common.runtime.settings import TierMemSettings
from services.recall_api.retrieval.metrics import RecallMetrics

ASSETS = Path(__file__).resolve().parents[2] / "infra" / "observability"
SERIES = re.compile(r"\btiermem_[a-z0-9_]+")
DURATION = re.compile(r"^\d+[smhd]$")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_series() -> set[str]:
    settings = TierMemSettings()
    health = ConsumerHealth(build_broker(settings, "assets-test"), Resources(settings), {}, timeout_s=0.2)
    registries: list[CollectorRegistry] = [REGISTRY, RecallMetrics().registry, health.registry]
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def balanced(expr: str) -> bool:
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for char in re.sub(r'"[^"]*"', '""', expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ASSETS / "grafana-dashboard.json").read_text())
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((ASSETS / "prometheus-alerts.yaml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_dashboard_structure() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    panels = board["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels), "panel ids are unique"
    cells = set()
    for panel in panels:
        assert panel["type"] in {"timeseries", "stat", "gauge", "table"}, panel["title"]
        assert panel["datasource"]["type"] == "prometheus", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert (grid["x"], grid["y"]) not in cells, f"{panel['title']} overlaps another panel"
        cells.add((grid["x"], grid["y"]))
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert ref_ids and len(set(ref_ids)) == len(ref_ids), panel["title"]
    titles = " ".join(panel["title"].lower() for panel in panels)
    for topic in ("lag", "throughput", "dead letters", "cost per day", "l0"):
        assert topic in titles, f"the dashboard shows {topic}"


def test_alert_rules_structure() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(set(names)) == len(names), "alert names are unique"
    for rule in rules:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"]), rule["alert"]
        assert DURATION.match(str(rule["for"])), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
    exprs = " ".join(rule["expr"] for rule in rules)
    for series in ("tiermem_consumer_pending", "tiermem_dead_letters_total", "tiermem_http_requests_total"):
        assert series in exprs, f"an alert watches {series} (lag growth, DLQ growth, recall errors)"


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_query_is_balanced_and_uses_exported_series(source: str) -> None:
    if source == "dashboard":
        exprs = [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]
    else:
        exprs = [rule["expr"] for rule in alert_rules()]
    exported = exported_series()
    for expr in exprs:
        assert balanced(expr), expr
        used = set(SERIES.findall(expr))
        assert used, f"{expr} queries no tiermem series"
        assert used <= exported, f"{expr} uses series tiermem does not export: {sorted(used - exported)}"
        assert not re.search(r"\b(tenant|user)(_id)?\s*[=~!]", expr), "no tenant or user label exists"
