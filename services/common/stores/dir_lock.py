"""One process at a time in a directory: an exclusive `flock` on a lock file inside it.

Used where the files below belong to one live process: the data dir of `tiermem up` (its servers and
stores) and Qdrant Edge's data (a shard's WAL admits one writer; a second process that got further
than the WAL would also clear build directories the first is using). The kernel releases the lock
when the holder dies, however it dies, so a crashed run never blocks the next one. The file records
the holder's pid, for the error message only."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

PRIVATE_FILE_MODE = 0o600


class DirInUse(RuntimeError):
    """Another live process holds the directory's lock."""


class DirLock:
    """The lock on `directory/lock_name`; a refused `acquire` says that `holder` has it (with its pid)
    and what to do (`hint`)."""

    def __init__(self, directory: Path, lock_name: str, *, holder: str, hint: str) -> None:
        self.directory = directory
        self.path = directory / lock_name
        self._holder = holder
        self._hint = hint
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (a no-op when this object holds it); DirInUse when another holder has it."""
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise DirInUse(f"{self.directory} is in use by {self._holder} (pid {pid}); {self._hint}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> DirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
