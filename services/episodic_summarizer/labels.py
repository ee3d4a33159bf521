"""Speaker labels of transcripts and passages: the display name when known, else the role in the
session's language."""

from __future__ import annotations

from contracts.events import Message

_ROLE_LABELS: dict[str, dict[str, str]] = {
    "ko": {"user": "사용자", "assistant": "어시스턴트", "tool": "도구", "system": "시스템"},
    "en": {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"},
}
# Every role label in any language: a summary line starting with one names a role, not a person.
ROLE_LABELS = frozenset(label.casefold() for labels in _ROLE_LABELS.values() for label in labels.values())


def speaker_label(message: Message, language: str) -> str:
    """The speaker's display name when known, else the role in the session's language."""
    if message.name and message.name.strip():
        return message.name.strip()
    return _ROLE_LABELS.get(language, _ROLE_LABELS["en"])[message.role]
