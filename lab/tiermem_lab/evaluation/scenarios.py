"""Cross-session scenarios (DESIGN §7): a fact is planted in one session and needed in a later one that
does not name it; some questions have "nothing is known" as their right answer.

The set (data/ko_cross_session.json next to this module, Korean) gives every scenario its own user, a few
sessions (dated `days_ago` before the run, so nothing ages out of the episode TTL) and probes. Every
probe is sent to L0 `recall/auto` after all sessions were consolidated, and to L1 `memory_search` for
reference. Probe kinds:

- `recall` (asserted): an item from an expected session is injected;
- `unknown` (asserted): nothing is injected (never said to this user, or said only by another user);
- `implicit` (measured): the session is needed, but the question shares no topic word with it;
- `adjacent_unknown` (measured): the topic is known, the asked detail was never said.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts import SessionCompleted
from services.common.domain.ids import deterministic_uuid
from tiermem_lab.evaluation.harness import EvalStack, embedded_stack, item_sessions, wait_for_consolidation

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_SCENARIOS = Path(__file__).resolve().parent / "data" / "ko_cross_session.json"
ASSERTED_KINDS = ("recall", "unknown")
MEASURED_KINDS = ("implicit", "adjacent_unknown")
PROBE_KINDS = (*ASSERTED_KINDS, *MEASURED_KINDS)
ROLES = ("user", "assistant")


class ScenarioFormatError(ValueError):
    """The scenario file is malformed; the message says where."""


@dataclass(frozen=True, slots=True)
class ScenarioSession:
    id: str
    days_ago: float
    messages: tuple[tuple[str, str], ...]  # (role, content)


@dataclass(frozen=True, slots=True)
class Probe:
    id: str
    kind: str
    message: str
    expect_sessions: tuple[str, ...]
    recent: tuple[tuple[str, str], ...] = ()

    @property
    def expects_nothing(self) -> bool:
        return self.kind in ("unknown", "adjacent_unknown")


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    user_id: str
    title: str
    sessions: tuple[ScenarioSession, ...]
    probes: tuple[Probe, ...]

    def session_id(self, session: str) -> str:
        return f"{self.id}-{session}"


@dataclass(frozen=True, slots=True)
class ScenarioSet:
    name: str
    language: str
    scenarios: tuple[Scenario, ...]

    @property
    def probes(self) -> list[tuple[Scenario, Probe]]:
        return [(scenario, probe) for scenario in self.scenarios for probe in scenario.probes]


def _turns(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise ScenarioFormatError(f"{where}: expected a list of [role, content] pairs")
    turns: list[tuple[str, str]] = []
    for position, turn in enumerate(raw):
        if not (isinstance(turn, list) and len(turn) == 2 and turn[0] in ROLES and isinstance(turn[1], str)):
            raise ScenarioFormatError(f'{where}[{position}]: expected ["user"|"assistant", text]')
        turns.append((turn[0], turn[1]))
    return tuple(turns)


def parse_scenarios(data: Any) -> ScenarioSet:
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), list):
        raise ScenarioFormatError("a scenario file is an object with a 'scenarios' list")
    scenarios: list[Scenario] = []
    users: set[str] = set()
    for position, raw in enumerate(data["scenarios"]):
        where = f"scenarios[{position}]"
        try:
            scenario_id, user_id = str(raw["id"]), str(raw["user_id"])
            sessions = tuple(
                ScenarioSession(str(s["id"]), float(s["days_ago"]), _turns(s["messages"], f"{where}.{s['id']}"))
                for s in raw["sessions"]
            )
            probes = tuple(
                Probe(
                    id=str(p["id"]),
                    kind=str(p["kind"]),
                    message=str(p["message"]),
                    expect_sessions=tuple(str(s) for s in p.get("expect_sessions", [])),
                    recent=_turns(p.get("recent", []), f"{where}.{p['id']}.recent"),
                )
                for p in raw["probes"]
            )
        except (KeyError, TypeError) as exc:
            raise ScenarioFormatError(f"{where}: missing or malformed field {exc}") from exc
        if user_id in users:
            raise ScenarioFormatError(f"{where}: user {user_id!r} is used by two scenarios (each needs its own)")
        users.add(user_id)
        session_ids = [s.id for s in sessions]
        if len(set(session_ids)) != len(session_ids):
            raise ScenarioFormatError(f"{where}: duplicate session ids")
        for probe in probes:
            if probe.kind not in PROBE_KINDS:
                raise ScenarioFormatError(f"{where}.{probe.id}: kind {probe.kind!r} is not one of {PROBE_KINDS}")
            unknown = set(probe.expect_sessions) - set(session_ids)
            if unknown:
                raise ScenarioFormatError(f"{where}.{probe.id}: expects unknown sessions {sorted(unknown)}")
            if probe.expects_nothing == bool(probe.expect_sessions):
                raise ScenarioFormatError(
                    f"{where}.{probe.id}: a {probe.kind} probe must "
                    + ("expect no session" if probe.expects_nothing else "expect at least one session")
                )
        scenarios.append(Scenario(scenario_id, user_id, str(raw.get("title", scenario_id)), sessions, probes))
    return ScenarioSet(str(data.get("name", "scenarios")), str(data.get("language", "")), tuple(scenarios))


def load_scenarios(path: Path) -> ScenarioSet:
    try:
        return parse_scenarios(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise ScenarioFormatError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from exc


def scenario_events(scenarios: ScenarioSet, *, tenant_id: str, now: datetime) -> list[SessionCompleted]:
    """One SessionCompleted per session, dated `days_ago` before `now` (whole minutes, so the event
    ids stay the same within a run)."""
    events: list[SessionCompleted] = []
    for scenario in scenarios.scenarios:
        for session in scenario.sessions:
            ended = (now - timedelta(days=session.days_ago)).replace(second=0, microsecond=0)
            started = ended - timedelta(minutes=max(1, len(session.messages)))
            events.append(
                SessionCompleted.model_validate(
                    {
                        "event_id": deterministic_uuid(
                            "scenario", scenarios.name, tenant_id, scenario.id, session.id, ended.isoformat()
                        ),
                        "tenant_id": tenant_id,
                        "user_id": scenario.user_id,
                        "agent_id": "scenario-agent",
                        "session_id": scenario.session_id(session.id),
                        "channel": "private",
                        "started_at": started,
                        "ended_at": ended,
                        "locale": scenarios.language or None,
                        "messages": [
                            {"role": role, "content": content, "ts": started + timedelta(minutes=i)}
                            for i, (role, content) in enumerate(session.messages)
                        ],
                    }
                )
            )
    return events


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    scenario: str
    probe: str
    kind: str
    expected: tuple[str, ...]
    injected_sessions: tuple[tuple[str, ...], ...]  # per injected item, its sessions (scenario session ids)
    l1_sessions: tuple[str, ...]  # sessions of L1's top episodes
    top_score: float | None
    tokens: int

    @property
    def recalled(self) -> bool:
        return any(set(item) & set(self.expected) for item in self.injected_sessions)

    @property
    def l1_hit(self) -> bool:
        return bool(set(self.l1_sessions) & set(self.expected))

    @property
    def contaminating(self) -> int:
        return sum(1 for item in self.injected_sessions if not set(item) & set(self.expected))

    @property
    def passed(self) -> bool:
        if self.kind in ("unknown", "adjacent_unknown"):
            return not self.injected_sessions
        return self.recalled


def summarize_outcomes(outcomes: Sequence[ProbeOutcome]) -> dict[str, Any]:
    """Per kind: probes, passed, rate; recall/implicit: contamination (pooled) and L1 hits;
    `all_passed` covers the asserted kinds only."""
    by_kind: dict[str, Any] = {}
    for kind in PROBE_KINDS:
        group = [o for o in outcomes if o.kind == kind]
        if not group:
            continue
        injected = sum(len(o.injected_sessions) for o in group)
        stats: dict[str, Any] = {
            "probes": len(group),
            "passed": sum(1 for o in group if o.passed),
            "rate": sum(1 for o in group if o.passed) / len(group),
        }
        if kind in ("recall", "implicit"):
            stats["contamination_rate"] = (sum(o.contaminating for o in group) / injected) if injected else None
            stats["l1_hit_rate"] = sum(1 for o in group if o.l1_hit) / len(group)
        by_kind[kind] = stats
    asserted = [o for o in outcomes if o.kind in ASSERTED_KINDS]
    return {
        "by_kind": by_kind,
        "asserted_failures": [f"{o.scenario}/{o.probe}" for o in asserted if not o.passed],
        "all_passed": all(o.passed for o in asserted),
    }


async def ingest_scenarios(stack: EvalStack, scenarios: ScenarioSet, *, now: datetime) -> int:
    from services.cli.ingest import publish_sessions

    events = scenario_events(scenarios, tenant_id=stack.tenant_id, now=now)
    await publish_sessions(stack.settings, events)
    await wait_for_consolidation(stack.settings, timeout_s=600)
    return len(events)


async def ask_probes(stack: EvalStack, scenarios: ScenarioSet) -> list[ProbeOutcome]:
    """Every probe through L0 (with its recent turns) and L1 (episodes, limit 5)."""
    outcomes: list[ProbeOutcome] = []
    for scenario, probe in scenarios.probes:
        ids = {scenario.session_id(s.id): index for index, s in enumerate(scenario.sessions)}
        names = [s.id for s in scenario.sessions]
        recent = [{"role": role, "content": content} for role, content in probe.recent]
        auto = await stack.recall.auto(scenario.user_id, probe.message, recent_messages=recent)
        items = await item_sessions(stack, scenario.user_id, auto.items, ids)
        found = await stack.recall.search(scenario.user_id, probe.message, limit=5)
        outcomes.append(
            ProbeOutcome(
                scenario=scenario.id,
                probe=probe.id,
                kind=probe.kind,
                expected=probe.expect_sessions,
                injected_sessions=tuple(tuple(sorted(names[i] for i in item.sessions)) for item in items),
                l1_sessions=tuple(names[ids[item.session_id]] for item in found.items if item.session_id in ids),
                top_score=auto.top_score,
                tokens=auto.tokens,
            )
        )
    return outcomes


def scenario_report(scenarios: ScenarioSet, outcomes: Sequence[ProbeOutcome]) -> dict[str, Any]:
    return {
        "name": scenarios.name,
        "summary": summarize_outcomes(outcomes),
        "probes": [
            {
                "scenario": o.scenario,
                "probe": o.probe,
                "kind": o.kind,
                "expected": list(o.expected),
                "injected": [list(item) for item in o.injected_sessions],
                "l1": list(o.l1_sessions),
                "top_score": o.top_score,
                "tokens": o.tokens,
                "passed": o.passed,
            }
            for o in outcomes
        ],
    }


async def run_scenarios_embedded(path: Path, work_dir: Path | None = None) -> dict[str, Any]:
    """`tiermem eval scenarios`: a fresh embedded stack (temp dir unless `work_dir`), ingest, ask."""
    scenarios = load_scenarios(path)
    owns_dir = work_dir is None
    directory = Path(tempfile.mkdtemp(prefix="tiermem-scenarios-")) if work_dir is None else work_dir
    try:
        async with embedded_stack(directory, tenant_id="scenarios") as stack:
            await ingest_scenarios(stack, scenarios, now=datetime.now(UTC))
            outcomes = await ask_probes(stack, scenarios)
    finally:
        if owns_dir:
            shutil.rmtree(directory, ignore_errors=True)
    return scenario_report(scenarios, outcomes)


def render_scenarios(report: Mapping[str, Any], console: Console) -> None:
    from rich.table import Table

    probes = Table(title=f"Scenarios: {report['name']}")
    for column in ("scenario/probe", "kind", "expected", "injected (sessions per item)", "L1 top 5", "top", "ok"):
        probes.add_column(column)
    for probe in report["probes"]:
        probes.add_row(
            f"{probe['scenario']}/{probe['probe']}",
            probe["kind"],
            ", ".join(probe["expected"]) or "nothing",
            "; ".join(",".join(item) or "?" for item in probe["injected"]) or "—",
            ", ".join(probe["l1"]) or "—",
            "—" if probe["top_score"] is None else f"{probe['top_score']:.2f}",
            "[green]yes[/]" if probe["passed"] else ("[red]no[/]" if probe["kind"] in ASSERTED_KINDS else "no"),
        )
    console.print(probes)
    summary = Table(title="By kind (recall and unknown are asserted; implicit and adjacent_unknown measured)")
    for column in ("kind", "probes", "passed", "rate", "contamination", "L1 hit rate"):
        summary.add_column(column)
    for kind, stats in report["summary"]["by_kind"].items():
        contamination = stats.get("contamination_rate")
        l1 = stats.get("l1_hit_rate")
        summary.add_row(
            kind,
            str(stats["probes"]),
            str(stats["passed"]),
            f"{stats['rate']:.2f}",
            "—" if contamination is None else f"{contamination:.2f}",
            "—" if l1 is None else f"{l1:.2f}",
        )
    console.print(summary)
    failures = report["summary"]["asserted_failures"]
    console.print("all asserted probes passed" if not failures else f"[red]failed:[/] {', '.join(failures)}")
