"""The `tiermem` command."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from services.common.runtime.settings import DEFAULT_DATA_DIR, TierMemSettings, load_settings

if TYPE_CHECKING:
    from contracts import SessionCompleted

app = typer.Typer(name="tiermem", help="Tiered long-term memory for AI agents.", no_args_is_help=True)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
]


def _settings(data_dir: Path | None) -> TierMemSettings:
    return load_settings(data_dir)


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from services.common.runtime.logs import configure_logging_from_env

    configure_logging_from_env(verbose)  # TIERMEM_LOG_LEVEL, TIERMEM_LOG_FORMAT (issue 15)


@app.command()
def up(
    data_dir: DataDirOption = None,
    http_port: Annotated[int, typer.Option("--http-port", help="Port of the recall HTTP API.")] = 8080,
    demo: Annotated[bool, typer.Option("--demo", help="Ingest the example sessions and show what was stored.")] = False,
) -> None:
    """Run the whole stack on loopback: nats-server, FalkorDB, every service and the recall API."""
    from services.cli.servers.net import PortInUseError
    from services.cli.stack import run_embedded
    from services.common.stores.dir_lock import DirInUse

    resolved = data_dir or Path(os.environ.get("TIERMEM_DATA_DIR") or DEFAULT_DATA_DIR)

    def _ready(settings: TierMemSettings) -> None:
        key = (resolved / "dev-api-key").read_text().strip()
        console.print(f"[bold green]tiermem is up[/] — data in {resolved.resolve()}")
        console.print(f"  recall API  http://127.0.0.1:{settings.http_port}  (OpenAPI at /openapi.json)")
        console.print(f"  NATS        {settings.nats.url}")
        console.print(f"  FalkorDB    {settings.graph.host}:{settings.graph.port}")
        if key in settings.api_keys:
            console.print(f"  API key     {key}  (also in {resolved / 'dev-api-key'})")
        else:
            # Configured keys replace the dev key (settings.StackFileSource): printing it would hand out a 401.
            console.print(
                f"  API keys    the {len(settings.api_keys)} configured in TIERMEM_API_KEYS; the dev key in "
                f"{resolved / 'dev-api-key'} is not accepted"
            )
        console.print("Press Ctrl-C to stop.")

    try:
        asyncio.run(run_embedded(resolved.resolve(), http_port, demo=demo, on_ready=_ready))
    except (PortInUseError, DirInUse) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    console.print("tiermem stopped.")


DEFAULT_INGEST_TENANT = "local"  # the tenant of `tiermem up`'s dev key


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help=".json (one session or a list) or .jsonl files.")],
    data_dir: DataDirOption = None,
    tenant: Annotated[
        str, typer.Option("--tenant", help="Tenant of the records that name none (tiermem up's key: local).")
    ] = DEFAULT_INGEST_TENANT,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Then follow every event (over the recall API) until it is consolidated, processed or "
            "dead-lettered; exit 1 on a dead letter.",
        ),
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")] = 600.0,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="TIERMEM_API_KEY", help="For --wait; default: the dev key.")
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", envvar="TIERMEM_RECALL_URL", help="For --wait; default: the stack's.")
    ] = None,
) -> None:
    """Validate sessions from files and publish the valid ones. A record may be a whole SessionCompleted
    or only `user_id` and `messages`: the rest is filled in as `POST /v1/sessions` does (the same turns
    are the same event, so ingesting a file again reports duplicates)."""
    from rich.progress import Progress

    from services.cli.ingest import load_sessions, publish_sessions

    settings = _settings(data_dir)
    loaded = load_sessions(paths, settings.limits, tenant)
    for rejected in loaded.rejected:
        err_console.print(f"[red]rejected[/] {rejected}", markup=True, highlight=False)
    events = [event for _, _, event in loaded.valid]
    if events:
        with Progress(console=err_console, transient=True, disable=len(events) < 50) as progress:
            task = progress.add_task("publishing", total=len(events))
            from services.cli.broker_loss import exit_on_broker_loss

            with exit_on_broker_loss(err_console, "nothing more was published", code=2):
                counts = asyncio.run(publish_sessions(settings, events, lambda: progress.advance(task)))
    else:
        from services.cli.ingest import PublishCounts

        counts = PublishCounts()
    console.print(f"published {counts.published}, duplicate {counts.duplicate}, rejected {len(loaded.rejected)}")
    waited = _wait_for(events, data_dir, api_key, url, timeout) if wait and events else 0
    if loaded.rejected or waited:
        raise typer.Exit(1)


def _wait_for(
    events: list[SessionCompleted], data_dir: Path | None, api_key: str | None, url: str | None, timeout: float
) -> int:
    """`ingest --wait`: the exit code of following `events` to where they settle."""
    from services.cli.following import report_wait, wait_for_ingested
    from services.cli.recall import ApiTarget

    followed = list(dict.fromkeys((str(event.event_id), event.user_id) for event in events))
    outcome = wait_for_ingested(ApiTarget(data_dir, api_key, url), followed, err_console, timeout)
    return report_wait(outcome, console)


@app.command()
def serve(
    service: Annotated[
        str, typer.Argument(help="episodic-summarizer | semantic-extractor | dedup | pruner | recall-api")
    ],
    data_dir: DataDirOption = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            min=1, max=65535, help="recall-api only: port of the HTTP API (default TIERMEM_HTTP_PORT, else 8080)."
        ),
    ] = None,
) -> None:
    """Run one service alone against the servers named by settings (how Kubernetes runs it): one
    consumer per process, wired by the same composition root as `tiermem up`."""
    from services.cli.servers.net import PRIVATE_UMASK, PortInUseError, ensure_port_free
    from services.cli.stack import all_services, serve_recall_api
    from services.common.runtime.root import HttpApiStartFailed
    from services.common.stores.dir_lock import DirInUse

    os.umask(PRIVATE_UMASK)  # the Edge WAL and payload files it writes hold memory text
    settings = _settings(data_dir)
    if http_port is not None:
        if service != "recall-api":
            err_console.print(f"[red]error:[/] --http-port applies to recall-api only ({service} serves no HTTP API)")
            raise typer.Exit(2)
        settings = settings.model_copy(update={"http_port": http_port})
    if service == "recall-api":
        from services.recall_api.auth import check_api_keys

        try:
            check_api_keys(settings.api_keys)  # refuse placeholder or short keys before anything starts
            ensure_port_free(settings.http_port, "the recall API", settings.http_host)
        except (ValueError, PortInUseError) as exc:
            err_console.print(f"[red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        try:
            asyncio.run(serve_recall_api(settings))
        except (DirInUse, HttpApiStartFailed) as exc:  # start-up refusals; anything else keeps its traceback
            err_console.print(f"[red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        return
    from services.common.runtime.root import create_service_app

    definitions = {definition.name: definition for definition in all_services()}
    if service not in definitions:
        err_console.print(f"[red]error:[/] unknown service {service!r}; one of {', '.join(definitions)}, recall-api")
        raise typer.Exit(2)
    faststream_app = create_service_app(definitions[service], settings)
    from services.common.runtime.broker import BrokerUnavailable

    try:
        asyncio.run(faststream_app.run())
    except (DirInUse, BrokerUnavailable) as exc:  # raised by the start-up hooks, before the broker starts
        err_console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc


def _register_subcommands() -> None:
    from services.cli.audit import audit_app
    from services.cli.lab import add_lab_commands
    from services.cli.prune import prune_command

    app.command("prune")(prune_command)

    from services.cli.provision import provision_command

    app.command("provision")(provision_command)
    app.add_typer(audit_app, name="audit")
    add_lab_commands(app)  # `tiermem eval`, `tiermem bench`: from the lab, when it is installed

    from services.cli.recall import mcp_command, recall_app

    app.add_typer(recall_app, name="recall")
    app.command("mcp")(mcp_command)

    from services.cli.memories import memories_app, sessions_app

    app.add_typer(memories_app, name="memories")
    app.add_typer(sessions_app, name="sessions")

    from services.cli.following import events_app

    app.add_typer(events_app, name="events")

    from services.cli.dlq import dlq_app
    from services.cli.dump import dump_command

    app.add_typer(dlq_app, name="dlq")
    app.command("dump")(dump_command)
    from services.cli.stats import stats_command  # issue 15

    app.command("stats")(stats_command)


_register_subcommands()

schemas_app = typer.Typer(help="Event JSON Schemas, the AsyncAPI document and the configuration reference.")
app.add_typer(schemas_app, name="schemas")


@schemas_app.command("export")
def schemas_export(
    out: Annotated[Path, typer.Option("--out", help="Directory to write into.")] = Path("contracts/schemas"),
) -> None:
    """Write the event JSON Schemas and the AsyncAPI document (committed; CI checks for drift)."""
    from services.cli.schemas import write_schemas

    for path in write_schemas(out):
        console.print(f"wrote {path}")


@schemas_app.command("config-docs")
def schemas_config_docs(
    out: Annotated[Path, typer.Option("--out", help="File to write.")] = Path("docs/configuration.md"),
) -> None:
    """Write docs/configuration.md from the settings models (committed; a test checks for drift)."""
    from services.cli.config_docs import write_config_docs

    console.print(f"wrote {write_config_docs(out)}")


def main() -> None:
    app()
