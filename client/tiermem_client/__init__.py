"""tiermem-client: the recall API from a chat system, without the server stack.

`TiermemClient` (blocking) and `AsyncTiermemClient` (asyncio) cover sessions in (`add(messages,
user_id=...)`, `add_session`, then `wait`), recall (L0 `auto`, L1 `search`/`expand`, L2 `graph`), facts
and forgetting; results are typed pydantic models and errors are `TiermemError` subclasses.
"""

from tiermem_client.client import DEFAULT_URL, AsyncTiermemClient, RetryPolicy, TiermemClient
from tiermem_client.context import BuiltContext, ContextBuilder, Dropped, SlotShares
from tiermem_client.errors import (
    ApiError,
    AuthenticationError,
    DeadLettered,
    InvalidRequestError,
    NotFoundError,
    TiermemError,
    TransportError,
    UnavailableError,
    WaitTimeout,
)
from tiermem_client.events import Message, SessionCompleted
from tiermem_client.models import (
    AutoRecallResponse,
    ChatTurn,
    EventStatus,
    ExpandedMemory,
    FactsResponse,
    GraphSearchResponse,
    MemoryItem,
    ProcedureRule,
    ProceduresResponse,
    SaveFactResponse,
    SearchResponse,
    SessionAccepted,
)
from tiermem_client.procedures import SHARED_RULES_USER, RuleStatement, SelectedRules, extract_rules, select_rules
from tiermem_client.tokens import (
    ApproximateCounter,
    ApproximateTokensWarning,
    O200kCounter,
    TokenCounter,
    TokenizerUnavailable,
    load_counter,
)
from tiermem_client.turn import TurnContext, TurnRequest, aturn_context, turn_context
from tiermem_client.working_memory import Compression, WorkingMemory, extractive_summary

__all__ = [
    "DEFAULT_URL",
    "SHARED_RULES_USER",
    "ApiError",
    "ApproximateCounter",
    "ApproximateTokensWarning",
    "AsyncTiermemClient",
    "AuthenticationError",
    "AutoRecallResponse",
    "BuiltContext",
    "ChatTurn",
    "Compression",
    "ContextBuilder",
    "DeadLettered",
    "Dropped",
    "EventStatus",
    "ExpandedMemory",
    "FactsResponse",
    "GraphSearchResponse",
    "InvalidRequestError",
    "MemoryItem",
    "Message",
    "NotFoundError",
    "O200kCounter",
    "ProcedureRule",
    "ProceduresResponse",
    "RetryPolicy",
    "RuleStatement",
    "SaveFactResponse",
    "SearchResponse",
    "SelectedRules",
    "SessionAccepted",
    "SessionCompleted",
    "SlotShares",
    "TiermemClient",
    "TiermemError",
    "TokenCounter",
    "TokenizerUnavailable",
    "TransportError",
    "TurnContext",
    "TurnRequest",
    "UnavailableError",
    "WaitTimeout",
    "WorkingMemory",
    "aturn_context",
    "extract_rules",
    "extractive_summary",
    "load_counter",
    "select_rules",
    "turn_context",
]
