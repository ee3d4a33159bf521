"""`tiermem provision`: everything the services expect to exist, created (or brought up to date)
before they start: the JetStream streams and every service's durable consumer, the vector
collections (with their payload indexes) and the graph's schema (uniqueness constraints on Neo4j).

Idempotent: each step is create-or-update, so the Kubernetes Job (infra/k8s/base/provision-job.yaml)
can run on every deploy, and the services still provision their own consumer on start-up (a pod
that starts before the Job finished does not fail)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from services.common.runtime.settings import TierMemSettings, load_settings

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


@dataclass
class ProvisionReport:
    """What now exists, by name."""

    streams: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    collections: list[str] = field(default_factory=list)
    graph: str = ""


class ProvisionError(Exception):
    """One step failed; the message names the step and the server it needed."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _step(what: str, work: Awaitable[object]) -> None:
    try:
        await work
    except Exception as exc:
        raise ProvisionError(f"{what}: {_describe(exc)}") from exc


async def provision_everything(settings: TierMemSettings) -> ProvisionReport:
    """Streams, every service's durable consumers, the vector collections and the graph schema."""
    from contracts import Subjects
    from services.cli.stack import all_services
    from services.common.runtime.provisioning import exhausted_watch_durable, provision, stream_configs
    from services.common.runtime.resources import Resources
    from services.common.stores.open_sessions import OpenSessionStore
    from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES

    subjects = Subjects(settings.nats.subject_root)
    consumers = [spec for definition in all_services() for spec in definition.consumers(subjects)]
    resources = Resources(settings)
    vector_at = settings.vector.url if settings.vector.backend == "server" else "the Qdrant Edge data dir"
    graph_at = (
        settings.graph.neo4j_uri
        if settings.graph.backend == "neo4j"
        else f"{settings.graph.host}:{settings.graph.port}"
    )
    try:
        await _step(f"cannot reach NATS at {settings.nats.url}", resources.jetstream())
        await _step("streams and consumers", provision(await resources.jetstream(), settings.nats, consumers))
        # The recall API's bucket of per-turn sessions still open (it also creates it when it starts).
        open_sessions = OpenSessionStore(await resources.jetstream(), subjects, replicas=settings.nats.replicas)
        await _step("open-session bucket", open_sessions.open())
        # Opening the index ensures each collection and its payload indexes.
        await _step(f"vector collections ({settings.vector.backend} at {vector_at})", resources.vector_index())
        # Opening the graph runs the backend's schema bootstrap (uniqueness constraints on Neo4j).
        await _step(f"graph schema ({settings.graph.backend} at {graph_at})", resources.graph())
    finally:
        await resources.close()
    return ProvisionReport(
        streams=[str(config.name) for config in stream_configs(settings.nats)],
        consumers=[f"{spec.stream}/{spec.durable}" for spec in consumers]
        + [f"{subjects.advisory_stream}/{exhausted_watch_durable(spec)}" for spec in consumers],
        collections=[EPISODES, PASSAGES, FACTS],
        graph=f"{settings.graph.backend} schema",
    )


def provision_command(
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data dir (env TIERMEM_DATA_DIR); only for the stack file.")
    ] = None,
) -> None:
    """Create or update the streams, durable consumers, vector collections and graph constraints the
    services need (idempotent; the Kubernetes provisioning Job runs this)."""
    settings = load_settings(data_dir)
    # The NATS client logs every failed connect with a traceback; the failure is reported below.
    logging.getLogger("nats.aio.client").setLevel(logging.CRITICAL)
    try:
        report = asyncio.run(provision_everything(settings))
    except ProvisionError as exc:  # one clear line for an operator, not a traceback
        err_console.print(f"[red]error:[/] provisioning failed: {exc}", highlight=False)
        raise typer.Exit(1) from exc
    console.print(f"streams      {', '.join(report.streams)}")
    console.print(f"consumers    {', '.join(report.consumers)}")
    console.print(f"collections  {', '.join(report.collections)} ({settings.vector.backend})")
    console.print(f"graph        {report.graph}")
    console.print("[green]provisioned[/]")
