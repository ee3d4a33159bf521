"""The client's vendored event and mirrored result models must match the server's exactly, field for
field: a change on one side without the other fails here instead of at a user's first call."""

from __future__ import annotations

import pytest
import tiermem_client
from pydantic import BaseModel
from tiermem_client import events, models, session_models

from contracts import Message as ServerMessage
from contracts import SessionCompleted as ServerSessionCompleted
from services.recall_api import schemas, write_schemas
from services.recall_api.facts import procedures
from services.recall_api.write import turn_schemas


@pytest.mark.parametrize(
    ("vendored", "original"),
    [(events.SessionCompleted, ServerSessionCompleted), (events.Message, ServerMessage)],
)
def test_the_vendored_event_has_the_same_json_schema_as_the_contract(
    vendored: type[BaseModel], original: type[BaseModel]
) -> None:
    assert vendored.model_json_schema() == original.model_json_schema()


MIRRORS: list[tuple[type[BaseModel], type[BaseModel]]] = [
    (models.MemoryItem, schemas.MemoryItem),
    (models.AutoRecallResponse, schemas.AutoRecallResponse),
    (models.SearchResponse, schemas.SearchResponse),
    (models.SourceMessage, schemas.SourceMessage),
    (models.ExpandedMemory, schemas.ExpandedMemory),
    (models.GraphSearchResponse, schemas.GraphSearchResponse),
    (models.SaveFactResponse, schemas.SaveFactResponse),
    (models.FactsResponse, schemas.FactsResponse),
    (models.ErasureAccepted, schemas.ErasureAccepted),
    (models.ChatTurn, schemas.ChatTurn),
    (models.Instructions, schemas.Instructions),
    (models.SessionAccepted, write_schemas.SessionAccepted),
    (models.ForgetAccepted, write_schemas.ForgetAccepted),
    (models.EventStatus, write_schemas.EventStatus),
    (models.MemoryRecord, write_schemas.MemoryRecord),
    (models.MemoryListResponse, write_schemas.MemoryListResponse),
    (models.FactObservation, write_schemas.FactObservation),
    (models.FactVersion, write_schemas.FactVersion),
    (models.FactHistoryResponse, write_schemas.FactHistoryResponse),
    (models.CorrectionResponse, write_schemas.CorrectionResponse),
    (models.ErrorDetail, write_schemas.ErrorDetail),
    (models.ProcedureRule, procedures.ProcedureRule),
    (models.ProceduresResponse, procedures.ProceduresResponse),
    (session_models.TurnsAccepted, turn_schemas.TurnsAccepted),
    (session_models.SessionEnded, turn_schemas.SessionEnded),
    (session_models.SessionTurn, turn_schemas.TurnOut),
    (session_models.OpenSession, turn_schemas.OpenSessionView),
]


@pytest.mark.parametrize(("mirror", "original"), MIRRORS, ids=[m.__name__ for m, _ in MIRRORS])
def test_each_result_model_has_the_servers_fields(mirror: type[BaseModel], original: type[BaseModel]) -> None:
    assert set(mirror.model_fields) == set(original.model_fields)
    server_required = {name for name, info in original.model_fields.items() if info.is_required()}
    client_required = {name for name, info in mirror.model_fields.items() if info.is_required()}
    assert client_required <= server_required, "the client must not require what the server may leave out"


def test_a_server_example_response_parses_into_the_client_model() -> None:
    example = schemas.AutoRecallResponse(
        section="## Memory Context\n- lives in Busan",
        items=[
            schemas.MemoryItem(
                id="f1",
                kind="fact",
                abstract="lives in Busan",
                score=0.9,
                weight=0.8,
                occurred_at=None,
                session_id=None,
            )
        ],
        injected=1,
        top_score=0.9,
        tokens=9,
        skipped_reason=None,
    )
    parsed = tiermem_client.AutoRecallResponse.model_validate_json(example.model_dump_json())
    assert parsed.items[0].abstract == "lives in Busan" and parsed.injected == 1
