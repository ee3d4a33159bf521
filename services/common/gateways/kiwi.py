"""The process's one Kiwi (kiwipiepy, Korean morphological analysis).

Loading Kiwi's model takes seconds and a few hundred MB, and keyword encoding, summarisation and
fact extraction all analyse Korean text: when the services run in one process they share this
analyser instead of loading one each. It is built on first use.

Kiwi does not promise that concurrent analysis calls on one instance are safe, and callers reach it
from `asyncio.to_thread` workers, so every analysis runs under one lock (the same lock guards the
lazy construction). `num_workers=0` makes Kiwi analyse in the calling thread instead of starting a
thread pool nobody uses: every caller analyses one text at a time. (kiwipiepy warns that the meaning
of 0 changed in 0.21, when it stopped meaning "all cores"; single-threaded is what is wanted here.)
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiwipiepy import Kiwi, Token

_kiwi: Kiwi | None = None
_lock = threading.Lock()


def _kiwi_locked() -> Kiwi:
    global _kiwi
    if _kiwi is None:
        from kiwipiepy import Kiwi  # imported lazily: loading the model costs seconds

        _kiwi = Kiwi(num_workers=0)
    return _kiwi


def shared_kiwi() -> Kiwi:
    """The process's analyser (built now if it was not yet). Analyse through `tokenize`, which
    serialises calls; this accessor is for warming up and for identity checks."""
    with _lock:
        return _kiwi_locked()


def tokenize(text: str) -> list[Token]:
    """Kiwi's morphemes of `text` (form, tag, start, len), one caller at a time."""
    with _lock:
        return list(_kiwi_locked().tokenize(text))


def warm_up() -> None:
    """Load the model now (seconds) instead of on the first Korean text."""
    tokenize("준비")
