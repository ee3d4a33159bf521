"""Event contracts: ids become subject tokens, timestamps are timezone-aware, sizes are bounded."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import ValidationError

from contracts import SessionCompleted, SizeLimitExceeded, SizeLimits, Subjects, check_session_size
from tests.support.events import session_event


def _raw(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = json.loads(session_event().model_dump_json())
    raw.update(changes)
    return raw


@pytest.mark.parametrize("field", ["tenant_id", "user_id", "agent_id", "session_id"])
@pytest.mark.parametrize("bad", ["a.b", "a*", "a>", "a b", "", "x" * 129, "한글"])
def test_ids_that_cannot_be_subject_tokens_are_rejected_naming_the_field(field: str, bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SessionCompleted.model_validate(_raw(**{field: bad}))
    assert field in str(caught.value)


def test_naive_timestamps_are_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        SessionCompleted.model_validate(_raw(started_at="2026-05-02T10:00:00"))
    assert "started_at" in str(caught.value)
    assert "timezone" in str(caught.value)


def test_missing_fields_and_unknown_fields_are_rejected() -> None:
    raw = _raw()
    del raw["messages"]
    with pytest.raises(ValidationError, match="messages"):
        SessionCompleted.model_validate(raw)
    with pytest.raises(ValidationError, match="surprise"):
        SessionCompleted.model_validate(_raw(surprise=1))


def test_end_before_start_is_rejected() -> None:
    with pytest.raises(ValidationError, match="ended_at"):
        SessionCompleted.model_validate(_raw(started_at="2026-05-03T10:00:00Z", ended_at="2026-05-02T10:00:00Z"))


def test_lone_surrogates_from_broken_utf8_are_rejected() -> None:
    broken = b"caf\xe9".decode("utf-8", errors="surrogateescape")
    with pytest.raises(ValidationError, match="UTF-8"):
        SessionCompleted.model_validate(_raw(messages=[{"role": "user", "content": broken}]))


def test_events_are_frozen() -> None:
    event = session_event()
    with pytest.raises(ValidationError):
        event.user_id = "bob"  # type: ignore[misc]


def test_size_limits_name_the_reason() -> None:
    event = session_event(texts=["a" * 50, "b" * 10, "c"])
    with pytest.raises(SizeLimitExceeded, match="3 messages; the limit is 2"):
        check_session_size(event, SizeLimits(max_messages=2))
    with pytest.raises(SizeLimitExceeded, match=r"messages\[0\] has 50 characters"):
        check_session_size(event, SizeLimits(max_message_chars=20))
    with pytest.raises(SizeLimitExceeded, match="bytes; the limit is 1024"):
        check_session_size(session_event(texts=["x" * 2000]), SizeLimits(max_event_bytes=1024))
    check_session_size(event, SizeLimits())


def test_korean_characters_count_as_code_points_not_bytes() -> None:
    event = session_event(texts=["가" * 20])
    check_session_size(event, SizeLimits(max_message_chars=20))


def test_subjects_carry_version_tenant_and_user() -> None:
    subjects = Subjects()
    assert subjects.session_completed("acme", "alice") == "memory.session.completed.v1.acme.alice"
    assert subjects.tokens_from("memory.session.completed.v1.acme.alice") == ("acme", "alice")
    assert subjects.tokens_from("memory.prune.completed.v1") == (None, None)
    assert Subjects("t1").session_stream == "T1_SESSIONS"


def test_event_id_round_trips() -> None:
    event_id = uuid.uuid4()
    event = session_event(event_id=event_id)
    assert SessionCompleted.model_validate_json(event.model_dump_json()).event_id == event_id


def test_prune_report_is_a_strict_frozen_event() -> None:
    from datetime import UTC, datetime

    from contracts import EVENT_MODELS, PruneReport

    at = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    raw: dict[str, object] = {
        "event_id": str(uuid.uuid4()),
        "now": at.isoformat(),
        "started_at": at.isoformat(),
        "finished_at": at.isoformat(),
        "owners_scanned": 1,
        "removed": {"episodes_expired": 2},
    }
    report = PruneReport.model_validate(raw)
    assert PruneReport in EVENT_MODELS
    assert report.event_type == "prune.completed"
    assert PruneReport.model_validate_json(report.model_dump_json()) == report
    with pytest.raises(ValidationError, match="surprise"):
        PruneReport.model_validate({**raw, "surprise": 1})
    with pytest.raises(ValidationError, match="timezone"):
        PruneReport.model_validate({**raw, "now": "2026-06-01T12:00:00"})
    with pytest.raises(ValidationError):
        report.owners_scanned = 2  # type: ignore[misc]
