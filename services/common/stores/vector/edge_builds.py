"""HNSW builds and compaction for Qdrant Edge that never block the request process.

Why: `EdgeShard.optimize()` holds the GIL for the whole build (tens of seconds at 100k points, during
which nothing in the process answers — not L0, not /readyz). So the build runs in a child process on
a copy of the shard, and the parent swaps the built copy in:

1. copy — the parent flushes the shard and copies its directory (in a thread, file copies release the
   GIL) while the collection's writes wait at the write gate; reads go on. From then on every update
   the parent applies is also kept in a journal.
2. build — a child process (low CPU priority) loads the copy, runs optimize(), flushes and closes it.
   The parent's event loop only awaits the child's exit.
3. swap — load the built shard, catch it up with the journal in slices of a few ms with the event
   loop free between them (writes go on and are journaled meanwhile), then take the write gate and
   replay the rest (still in slices: reads go on, only writes wait), flush, point the collection at
   it (an atomic rename of a small pointer file) and switch the reference: nothing runs on the loop
   between the pointer and the switch, so no write lands on the old shard after its last replay.
   Then the old shard is closed and its directory removed in a thread.

Compaction (vacuum) goes the same way. Deleted points (erasure, pruning) stay in Edge segments as
tombstones until optimize() rewrites the segment, so disk and scan cost grow with every delete. With
`index_builds = "never"` the child runs optimize() with an indexing threshold no segment reaches: it
drops tombstones and merges segments but builds no HNSW. That optimize() also holds the GIL
throughout, so it cannot run in the request process either.

What still stalls the process: loading the built copy at the swap and closing the old shard both hold
the GIL, whatever thread runs them, and grow with the shard (loading an appendable segment rebuilds
its in-memory indexes: the numeric payload indexes of the float time fields, the keyword map indexes,
the sparse inverted index, the id tracker). The journal is replayed in slices so that a long build's
writes never add to that stall; fewer indexed float fields, or a smaller shard per swap (a collection
sharded by owner hash), would shorten it.

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
import time
from collections.abc import Callable
from pathlib import Path

import qdrant_edge as qe

log = logging.getLogger(__name__)

_POINTER_SUFFIX = ".current"
_GENERATION = re.compile(r"^(?P<name>[A-Za-z0-9_-]{1,64})\.g(?P<number>[0-9]+)$")

# The engine's default: a segment is vacuumed once this fraction of its points is deleted (and it has
# at least 1000 vectors). Compaction is started when as many points were deleted since the last one.
VACUUM_DELETED_FRACTION = 0.2
VACUUM_MIN_DELETED = 1000
# An indexing threshold (KB) no segment reaches: optimize() then vacuums and merges but never indexes.
_NO_INDEXING_KB = 2**31 - 1
# The work a swap's journal replay does between two yields to the event loop (one operation may take
# longer: a replayed upsert chunk costs what it cost when it was first written).
_SLICE_S = 0.005

# The child needs nothing of this project: only the engine. Kept inline so that the child starts the
# same way from a checkout, a wheel or the container image (no import path to get right), with a low
# CPU priority so that the parent's turns win the cores while it builds. For "vacuum" it rewrites the
# optimizer settings of its private copy (the engine's own config file; the parent loads the result
# with its own config, which replaces them again).
_CHILD_CODE = """
import json, os, sys
os.nice(10)
import qdrant_edge
path, task = sys.argv[1], sys.argv[2]
if task == "vacuum":
    config_file = os.path.join(path, "edge_config.json")
    with open(config_file, encoding="utf-8") as handle:
        config = json.load(handle)
    config["optimizers"] = {**(config.get("optimizers") or {}), "indexing_threshold": int(sys.argv[3])}
    with open(config_file, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
shard = qdrant_edge.EdgeShard.load(path)
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


def compaction_due(points: int, deleted_since: int) -> bool:
    """Whether enough points were deleted since the last compaction for the engine to vacuum them."""
    return deleted_since >= VACUUM_MIN_DELETED and deleted_since >= VACUUM_DELETED_FRACTION * (points + deleted_since)


async def build_in_child(shard_dir: Path, *, vacuum_only: bool = False) -> None:
    """Optimize the shard at `shard_dir` in a child process: build its HNSW index (and vacuum), or with
    `vacuum_only` only drop deleted points and merge segments. BuildFailed if it fails. Cancelling this
    kills the child."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD_CODE,
        str(shard_dir),
        "vacuum" if vacuum_only else "index",
        str(_NO_INDEXING_KB),
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


async def catch_up(
    shard: qe.EdgeShard,
    journal: list[qe.UpdateOperation],
    start: int,
    *,
    left: int,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Replay `journal[start:]` into `shard` in slices of about `_SLICE_S` of work, yielding to the event
    loop between slices, until at most `left` operations are not replayed (the journal may grow while
    this runs: writes go on unless the caller holds the write gate). Returns the next index to replay."""
    done = start
    while len(journal) - done > left:
        deadline = clock() + _SLICE_S
        while done < len(journal) and clock() < deadline:
            shard.update(journal[done])
            done += 1
        await asyncio.sleep(0)
    return done


async def remove_dir(path: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, path, True)
