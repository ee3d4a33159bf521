"""Which sessions `tiermem bench ingest --locomo` publishes: the eval's events of the file, in its order,
in the form asked for, the first N when capped."""

from __future__ import annotations

import json
from pathlib import Path

from tiermem_lab.benchmarks.ingest import locomo_sessions
from tiermem_lab.benchmarks.synthetic import BENCH_TENANT


def _sample(sample_id: str, a: str, b: str, sessions: int) -> dict[str, object]:
    conversation: dict[str, object] = {"speaker_a": a, "speaker_b": b}
    for number in range(1, sessions + 1):
        conversation[f"session_{number}_date_time"] = f"10:00 am on {number} May, 2023"
        conversation[f"session_{number}"] = [
            {"speaker": a, "dia_id": f"D{number}:1", "text": f"{a} says thing {number}."},
            {"speaker": b, "dia_id": f"D{number}:2", "text": f"{b} answers thing {number}."},
        ]
    return {"sample_id": sample_id, "conversation": conversation, "qa": []}


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "two.json"
    path.write_text(json.dumps([_sample("c1", "Ann", "Bo", 2), _sample("c2", "Cy", "Di", 3)]), encoding="utf-8")
    return path


def test_chat_form_gives_every_session_of_every_conversation_in_order_with_roles(tmp_path: Path) -> None:
    events = locomo_sessions(_file(tmp_path), "chat")
    assert [e.session_id.rsplit("-", 1)[1] for e in events] == ["s1", "s2", "s1", "s2", "s3"]
    assert len({e.user_id for e in events}) == 2 and {e.tenant_id for e in events} == {BENCH_TENANT}
    assert [(m.role, m.name, m.content) for m in events[0].messages] == [
        ("user", "Ann", "Ann says thing 1."),
        ("assistant", "Bo", "Bo answers thing 1."),
    ]


def test_group_form_makes_every_turn_user_with_the_name_in_the_text(tmp_path: Path) -> None:
    events = locomo_sessions(_file(tmp_path), "group")
    assert {m.role for e in events for m in e.messages} == {"user"}
    assert [m.content for m in events[-1].messages] == ["Cy: Cy says thing 3.", "Di: Di answers thing 3."]


def test_a_cap_takes_the_first_sessions_in_the_files_order(tmp_path: Path) -> None:
    capped = locomo_sessions(_file(tmp_path), "chat", 3)
    assert [e.event_id for e in capped] == [e.event_id for e in locomo_sessions(_file(tmp_path), "chat")[:3]]
