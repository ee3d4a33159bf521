"""Speaker attribution, pure: a group chat or an imported transcript often arrives with every turn's
role `user` and the speaker's name written into the text ("Caroline: I went to a support group").
Left there, the name is keyword noise in every passage and the turn is attributed to "the user".

`attribute_speakers` moves such a label into the message's `name` field (and out of its content), so
the rest of the pipeline sees the same conversation whether it arrived as a labelled chat (names in
`name`) or as a transcript (names in the text). A label is taken only when it behaves like one across
the whole session: a short name-like prefix before a colon, at the start of most unnamed turns, with
few distinct labels each used more than once. "Note: the build is green" in one turn of a normal chat
stays text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from contracts.events import Message

# "Caroline: …", "Dr. Kim: …", "김민수: …", "민수 님： …". A label has at most four words, no sentence
# punctuation and no digits-only start (a time "10: 30" is not a speaker), and a space after the colon
# (so "http://…" and "12:30" never match).
_LABEL = re.compile(r"^\s*([^\W\d_][\w.'’\- ]{0,38}?)\s*[:：]\s+(\S.*)$", re.DOTALL)
_MAX_LABEL_WORDS = 4
# Shares of the unnamed turns that must carry a label, and most distinct labels per labelled turn:
# a transcript labels (nearly) every turn with a handful of recurring names.
MIN_LABELLED_SHARE = 0.6
MAX_DISTINCT_PER_TURN = 0.5


def speaker_label_in(content: str) -> tuple[str, str] | None:
    """(label, rest) when the content starts like "Name: text", else None."""
    match = _LABEL.match(content)
    if match is None:
        return None
    label = " ".join(match.group(1).split())
    if not label or len(label.split()) > _MAX_LABEL_WORDS:
        return None
    return label, match.group(2).strip()


def _labelled_turns(messages: Sequence[Message]) -> dict[int, tuple[str, str]]:
    """Index → (label, rest) for the unnamed user/assistant turns that start with a label."""
    found: dict[int, tuple[str, str]] = {}
    for index, message in enumerate(messages):
        if message.role not in ("user", "assistant") or (message.name and message.name.strip()):
            continue
        labelled = speaker_label_in(message.content)
        if labelled is not None:
            found[index] = labelled
    return found


def attribute_speakers(messages: Sequence[Message]) -> list[Message]:
    """The messages with in-text speaker labels moved into `name`, when the session reads as a
    labelled transcript (see the module doc); otherwise the messages unchanged. Turns that already
    have a name are never touched."""
    unnamed = [
        m for m in messages if m.role in ("user", "assistant") and not (m.name and m.name.strip()) and m.content.strip()
    ]
    labelled = _labelled_turns(messages)
    if not unnamed or len(labelled) < max(2, MIN_LABELLED_SHARE * len(unnamed)):
        return list(messages)
    counts = Counter(label.casefold() for label, _ in labelled.values())
    if len(counts) > max(2, MAX_DISTINCT_PER_TURN * len(labelled)):
        return list(messages)  # a different "label" nearly every turn: prose with colons, not speakers
    recurring = {label for label, count in counts.items() if count >= 2 or len(counts) <= 2}
    out: list[Message] = []
    for index, message in enumerate(messages):
        label_and_rest = labelled.get(index)
        if label_and_rest is None or label_and_rest[0].casefold() not in recurring:
            out.append(message)
            continue
        label, rest = label_and_rest
        out.append(message.model_copy(update={"name": label, "content": rest}))
    return out
