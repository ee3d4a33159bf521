"""Memory, prompt and model text (and user ids) in log lines: marked where they are logged, shown
only when the operator opts in.

A log call wraps such an argument in `SensitiveText`; its string form is a redaction (the length
and where the full text is kept), so a line formatted by any handler is safe by default. The
process's log handler (`runtime/logs.py`) swaps the marker for the text itself when
`TIERMEM_LOG_CONTENT=true`. Marking at the call and deciding at the handler keeps the policy in
one place and the call sites free of settings."""

from __future__ import annotations

from dataclasses import dataclass

CONTENT_SETTING = "TIERMEM_LOG_CONTENT"


@dataclass(frozen=True, slots=True)
class SensitiveText:
    """A log argument that may quote memory or model text. `kept_in` names where an operator finds
    the full text (e.g. "the dead-letter record"), so the redaction still says where to look."""

    text: str
    kept_in: str = ""

    def redacted(self) -> str:
        where = f"; full text in {self.kept_in}" if self.kept_in else ""
        return f"<redacted {len(self.text)} chars{where}; {CONTENT_SETTING}=true logs it>"

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return self.redacted()


def sensitive(value: object, kept_in: str = "") -> SensitiveText:
    """`value` (its string form) as a log argument shown only when content logging is on."""
    return SensitiveText(str(value), kept_in)
