"""What the recall API publishes, declared like a consumer service's `publishes` so the AsyncAPI
document is derived from it."""

from __future__ import annotations

from collections.abc import Sequence

from contracts import ErasureRequested, Subjects
from services.common.runtime.service import PublishedEvent


def publishes(subjects: Subjects) -> Sequence[PublishedEvent]:
    return (
        PublishedEvent(
            subjects.all_of("erasure.requested"), ErasureRequested, "recall-api: a user asked to be forgotten."
        ),
    )
