"""A deterministic batch of sessions for the fault tests: several tenants and users, facts and
entities to extract, fixed ids (a rerun publishes the very same events)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

OWNERS = [("acme", "alice"), ("acme", "bob"), ("globex", "carol")]
CITIES = ["Seoul", "Berlin", "Lisbon", "Toronto", "Osaka", "Nairobi"]
LANGUAGES = ["Go", "Rust", "Python", "Kotlin", "Elixir", "Haskell"]
PROJECTS = ["Atlas", "Borealis", "Cobalt", "Dynamo", "Ember", "Fjord"]
_NAMESPACE = uuid.UUID("0f5f7a52-3c51-4e55-9a3e-1a2b3c4d5e6f")


def session_records(count: int) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    for index in range(count):
        tenant, user = OWNERS[index % len(OWNERS)]
        city, language, project = (CITIES[index % 6], LANGUAGES[(index * 5) % 6], PROJECTS[(index * 7) % 6])
        began = start + timedelta(days=index)
        texts = [
            f"Morning! I moved to {city} last month and I work at {tenant.title()} Labs now.",
            f"Welcome to {city}. What are you working on at {tenant.title()} Labs?",
            f"We decided to build the {project} service in {language}; the deadline is June {10 + index % 20}.",
            f"Noted: {project} in {language}. I will draft the plan for {project}.",
            f"My favourite editor is Helix and my manager is Dana {project}.",
        ]
        records.append(
            {
                "event_id": str(uuid.uuid5(_NAMESPACE, f"event-{index}")),
                "tenant_id": tenant,
                "user_id": user,
                "agent_id": "assistant",
                "session_id": f"fault-session-{index:03d}",
                "channel": "private",
                "scope": "personal",
                "started_at": began.isoformat(),
                "ended_at": (began + timedelta(minutes=20)).isoformat(),
                "locale": "en",
                "messages": [
                    {"role": "user" if turn % 2 == 0 else "assistant", "content": text}
                    for turn, text in enumerate(texts)
                ],
            }
        )
    return records


def write_sessions(path: Path, count: int) -> Path:
    path.write_text("\n".join(json.dumps(record) for record in session_records(count)) + "\n", encoding="utf-8")
    return path
