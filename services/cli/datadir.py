"""The data dir of `tiermem up`: one owner at a time (a lock held for the life of the stack), private
(0700, files 0600: it holds memory text), and cleared of servers a crashed earlier run left behind."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from services.common.stores.dir_lock import PRIVATE_FILE_MODE, DirLock

log = logging.getLogger(__name__)

LOCK_FILE = "tiermem.lock"
PRIVATE_DIR_MODE = 0o700

# The config files the embedded servers are started with: a process whose command line names one of
# them (inside this data dir) is one of our servers.
SERVER_CONFIGS = (Path("nats") / "nats-server.conf", Path("falkordb") / "falkordb.conf")


class DataDirLock(DirLock):
    """The lock of `tiermem up`'s data dir (`tiermem.lock`), held while the stack runs (dir_lock.py)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(
            data_dir, LOCK_FILE, holder="another `tiermem up`", hint="stop it first, or use another --data-dir"
        )


def leftover_servers(data_dir: Path) -> list[int]:
    """Pids of live processes started with one of this data dir's server configs (Linux /proc;
    elsewhere none are found). Only called while holding the lock, so none of them belongs to a
    live `tiermem up`: they are orphans of a crashed one."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    configs = [str((data_dir / config).resolve()).encode() for config in SERVER_CONFIGS]
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if any(config in arguments for config in configs):
            found.append(int(entry.name))
    return sorted(found)


def stop_leftover_servers(data_dir: Path, timeout_s: float = 10.0) -> list[int]:
    """SIGTERM the orphaned servers of a crashed run (they flush their files), SIGKILL what is still
    there after `timeout_s`, so the new servers never share a JetStream store or an AOF with them."""
    pids = leftover_servers(data_dir)
    if not pids:
        return []
    log.warning("stopping servers left behind by a crashed run on %s: pids %s", data_dir, pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (dead, not yet reaped by its new parent) counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def make_private(data_dir: Path) -> None:
    """0700 for the data dir and every directory in it, 0600 for every file: what earlier versions
    (or a umask of 022) created readable by every local user is closed up before anything starts."""
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, PRIVATE_DIR_MODE)
    for root, directories, files in os.walk(data_dir):
        for names, mode in ((directories, PRIVATE_DIR_MODE), (files, PRIVATE_FILE_MODE)):
            for name in names:
                path = Path(root) / name
                if not path.is_symlink():  # never change what a link points to
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(path, mode)
