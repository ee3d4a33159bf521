"""HNSW builds for Qdrant Edge that never block the request process.

Why: `EdgeShard.optimize()` holds the GIL for the whole build (measured: 27 s at 55k points, 50 s at
100k, during which nothing in the process answered — not L0, not /readyz). So the build runs in a
child process on a copy of the shard, and the parent swaps the built copy in:

1. copy — the parent flushes the shard and copies its directory (in a thread, file copies release the
   GIL) while the collection's writes wait at the write gate; reads go on. From then on every update
   the parent applies is also kept in a journal.
2. build — a child process (low CPU priority) loads the copy, runs optimize(), flushes and closes it.
   The parent's event loop only awaits the child's exit.
3. swap — in one synchronous step (nothing else runs on the event loop in between): load the built
   shard, replay the journal into it, flush, point the collection at it (an atomic rename of a small
   pointer file), close the old shard. Then the old directory is removed in a thread.

On-disk layout: the first generation of a collection is `data_dir/<collection>/` (the layout every
existing data dir has); later ones are `data_dir/<collection>.g<N>/`, named by the pointer file
`data_dir/<collection>.current`. A crash at any point leaves either the old or the new generation
current, both complete; leftovers are removed the next time the collection is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import sys
from pathlib import Path

log = logging.getLogger(__name__)

_POINTER_SUFFIX = ".current"
_GENERATION = re.compile(r"^(?P<name>[A-Za-z0-9_-]{1,64})\.g(?P<number>[0-9]+)$")

# The child needs nothing of this project: only the engine. Kept inline so that the child starts the
# same way from a checkout, a wheel or the container image (no import path to get right), with a low
# CPU priority so that the parent's turns win the cores while it builds.
_CHILD_CODE = """
import os, sys
os.nice(10)
import qdrant_edge
shard = qdrant_edge.EdgeShard.load(sys.argv[1])
shard.optimize()
shard.flush()
shard.close()
"""


class BuildFailed(RuntimeError):
    """The child process building an index exited with an error."""


def current_dir(data_dir: Path, collection: str) -> Path:
    """The directory holding the collection's current generation."""
    pointer = data_dir / f"{collection}{_POINTER_SUFFIX}"
    if pointer.exists():
        name = pointer.read_text(encoding="utf-8").strip()
        match = _GENERATION.match(name)
        if match is None or match["name"] != collection:
            raise ValueError(f"{pointer} names {name!r}, which is not a generation of {collection!r}")
        return data_dir / name
    return data_dir / collection


def next_dir(data_dir: Path, collection: str) -> Path:
    """A fresh directory for the next generation (numbers only grow, so a leftover is never reused)."""
    numbers = [0]
    for entry in data_dir.glob(f"{collection}.g*"):
        match = _GENERATION.match(entry.name)
        if match is not None and match["name"] == collection:
            numbers.append(int(match["number"]))
    current = _GENERATION.match(current_dir(data_dir, collection).name)
    if current is not None:
        numbers.append(int(current["number"]))
    return data_dir / f"{collection}.g{max(numbers) + 1}"


def point_to(data_dir: Path, collection: str, generation: Path) -> None:
    """Make `generation` the current one, atomically (a crash leaves the old or the new pointer)."""
    pointer = data_dir / f"{collection}{_POINTER_SUFFIX}"
    staged = pointer.with_suffix(".tmp")
    staged.write_text(generation.name, encoding="utf-8")
    with open(staged, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(staged, pointer)


def remove_leftovers(data_dir: Path, collection: str) -> None:
    """Delete generations that are not current (an interrupted build, or an old one not yet removed)."""
    current = current_dir(data_dir, collection)
    candidates = [data_dir / collection, *data_dir.glob(f"{collection}.g*")]
    for entry in candidates:
        match = _GENERATION.match(entry.name)
        is_generation = entry.name == collection or (match is not None and match["name"] == collection)
        if is_generation and entry.is_dir() and entry != current:
            log.info("removing leftover vector index generation %s", entry)
            shutil.rmtree(entry, ignore_errors=True)


async def copy_shard(source: Path, target: Path) -> None:
    """Copy a flushed shard directory (in a thread: the file copies release the GIL). A copy that
    fails or is cancelled leaves nothing behind: a thread cannot be stopped, so cancelling waits for
    it to finish, then removes the partial copy."""
    copying = asyncio.ensure_future(asyncio.to_thread(shutil.copytree, source, target))
    try:
        await asyncio.shield(copying)
    except BaseException:
        with contextlib.suppress(Exception):
            await copying
        await remove_dir(target)
        raise


async def build_in_child(shard_dir: Path) -> None:
    """Build the HNSW index of the shard at `shard_dir` in a child process; BuildFailed if it fails.
    Cancelling this kills the child."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD_CODE,
        str(shard_dir),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        tail = stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
        raise BuildFailed(f"index build of {shard_dir} exited with {process.returncode}: {' | '.join(tail)}")


async def remove_dir(path: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, path, True)
