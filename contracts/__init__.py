"""Public event contracts of tiermem.

This package imports nothing else from the project: upstream producers may vendor it.
"""

from contracts.events import (
    EVENT_MODELS,
    Channel,
    DeadLetterRecord,
    EntityMerged,
    EntityRef,
    EntityUpserted,
    EpisodeCreated,
    ErasureCompleted,
    ErasureRequested,
    ErasureTarget,
    Message,
    MessageRole,
    PruneReport,
    Scope,
    SessionCompleted,
)
from contracts.limits import SizeLimitExceeded, SizeLimits, check_session_size
from contracts.subjects import Subjects

__all__ = [
    "EVENT_MODELS",
    "Channel",
    "DeadLetterRecord",
    "EntityMerged",
    "EntityRef",
    "EntityUpserted",
    "EpisodeCreated",
    "ErasureCompleted",
    "ErasureRequested",
    "ErasureTarget",
    "Message",
    "MessageRole",
    "PruneReport",
    "Scope",
    "SessionCompleted",
    "SizeLimitExceeded",
    "SizeLimits",
    "Subjects",
    "check_session_size",
]
