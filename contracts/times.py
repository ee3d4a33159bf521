"""The instants an event may carry, defined once for every contract.

A date is accepted only if every stage can compute with it: the summarizer adds the episode TTL to
`ended_at`, the stores keep POSIX timestamps next to ISO text, ranking counts ages from it. A year-9999
`ended_at` parsed fine and then overflowed on every delivery until it was dead-lettered, after the
producer had been told 202. So the window is checked where the event is parsed (HTTP, MCP, `tiermem
ingest`, a consumer), and a date outside it is refused with the field's name. The window leaves
centuries of room on both sides of any real conversation while staying far from `datetime`'s limits,
and starts at the POSIX epoch so no stored timestamp is negative.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2199, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
WINDOW_TEXT = "1970-01-01T00:00:00Z to 2199-12-31T23:59:59Z"


class OutOfWindow(ValueError):
    """An instant outside the accepted window."""


def check_in_window(value: datetime) -> datetime:
    """`value` unchanged when it is timezone-aware and inside the window (compared in UTC; the
    comparison itself cannot overflow, whatever the offset); OutOfWindow otherwise."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise OutOfWindow("must carry a timezone (e.g. 2026-05-02T09:30:00Z)")
    if not EARLIEST <= value <= LATEST:
        raise OutOfWindow(f"must be within {WINDOW_TEXT}")
    return value


# The one type of every client-supplied instant in the contracts.
EventTime = Annotated[AwareDatetime, AfterValidator(check_in_window)]
