"""`tiermem dump`: a deterministic JSON of everything the stores hold (episodes, passages, facts,
graph nodes and edges), per tenant/user, without volatile fields such as recall times. Two runs that
learned the same things give byte-equal dumps, so `diff` shows what a fault changed.

The embedded stack's stores are read with the stack stopped: its Qdrant Edge shard belongs to one
process. The dump then holds the data-dir lock (no `tiermem up` can start meanwhile) and runs
FalkorDB on the data dir's AOF for as long as it reads. With external servers (settings naming a
Qdrant server and a graph server) it reads them directly."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from services.cli.datadir import DataDirLock
from services.cli.servers.falkordb_server import FalkorDBServer
from services.cli.servers.net import free_port
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.runtime.settings import (
    DEFAULT_DATA_DIR,
    GraphSettings,
    TierMemSettings,
    VectorSettings,
    load_settings,
    read_stack_file,
)
from services.common.stores.dir_lock import DirInUse
from services.common.stores.snapshot import snapshot, to_json

err_console = Console(stderr=True, soft_wrap=True)


class StackRunning(RuntimeError):
    """The embedded stack is running and owns the stores this would open."""


async def dump_stores(settings: TierMemSettings, only: list[Owner] | None = None) -> dict[str, dict[str, Any]]:
    """The canonical snapshot of the stores named by `settings` (see services.common.stores.snapshot)."""
    resources = Resources(settings)
    try:
        index = await resources.vector_index()
        graph = await resources.graph()
        return await snapshot(index, graph.executor, only)
    finally:
        await resources.close()


@contextlib.contextmanager
def stopped_embedded_stack(data_dir: Path) -> Iterator[TierMemSettings]:
    """Settings for the stores of a stopped embedded stack in `data_dir`: the lock held, FalkorDB
    started on the data dir's AOF (and stopped afterwards), the Edge directory opened in-process."""
    secrets_path = data_dir / "secrets.json"
    if not secrets_path.exists():
        raise FileNotFoundError(f"{data_dir} holds no embedded stack (no secrets.json)")
    password = str(json.loads(secrets_path.read_text(encoding="utf-8"))["graph_password"])
    if read_stack_file(data_dir) is not None and not _lock_free(data_dir):
        raise StackRunning(f"the embedded stack in {data_dir} is running and owns its stores; stop it and dump again")
    # The lock first: a running `tiermem up` holds it (and owns the stores); a stack file left by a
    # crashed one does not matter.
    with DataDirLock(data_dir), FalkorDBServer(data_dir / "falkordb", free_port(), password) as graph:
        yield TierMemSettings(
            data_dir=data_dir,
            graph=GraphSettings(backend="falkordb", host=graph.host, port=graph.port, password=password),  # type: ignore[arg-type]
            vector=VectorSettings(backend="edge", path=data_dir / "qdrant-edge"),
        )


def _lock_free(data_dir: Path) -> bool:
    try:
        with DataDirLock(data_dir):
            return True
    except DirInUse:
        return False


def dump_data_dir(data_dir: Path, only: list[Owner] | None = None) -> dict[str, dict[str, Any]]:
    """The snapshot of a stopped embedded stack (what the fault tests compare)."""
    with stopped_embedded_stack(data_dir) as settings:
        return asyncio.run(dump_stores(settings, only))


def dump_command(
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's users (with --user: one).")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user (needs --tenant).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write here instead of stdout.")] = None,
) -> None:
    """Everything the stores hold, per tenant/user, as deterministic JSON (no write or recall times):
    compare two dumps with `diff`. The embedded stack must be stopped; external stores are read live."""
    settings = load_settings(data_dir)
    resolved = (data_dir or settings.data_dir or DEFAULT_DATA_DIR).resolve()
    if user is not None and tenant is None:
        err_console.print("[red]error:[/] --user needs --tenant")
        raise typer.Exit(2)
    only = [Owner(tenant, user)] if tenant is not None and user is not None else None
    try:
        if settings.vector.backend == "edge":
            dumped = dump_data_dir(resolved, only)
        else:
            dumped = asyncio.run(dump_stores(settings, only))
    except (StackRunning, DirInUse, FileNotFoundError, OSError, TimeoutError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if tenant is not None and user is None:
        dumped = {key: value for key, value in dumped.items() if key.split("/", 1)[0] == tenant}
    text = to_json(dumped)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        write_private(out, text)
    except OSError as exc:
        err_console.print(f"[red]error:[/] could not write {out}: {exc.strerror or exc}")
        raise typer.Exit(2) from exc


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only, as the data dir it comes from is: the file is
    0600 from the moment it exists (mkstemp's mode, whatever the umask), written beside the target
    and renamed over it, so a reader finds the previous file or the whole new one, never a part."""
    descriptor, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        raise
