"""The LoCoMo data set (DESIGN §7): its data model, the parser, and the events it is ingested as.

Every sample is one user and every session of it one `SessionCompleted` (the session date as its time;
speaker_a's turns as role "user", speaker_b's as "assistant", each with the speaker's name; a shared
photo becomes "[shares a photo: <caption>]").
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from contracts import Message, SessionCompleted
from services.common.domain.ids import deterministic_uuid
from services.recall_api.retrieval.query_time import MONTH_NUMBERS

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = 5


class LocomoFormatError(ValueError):
    """The file is not in the LoCoMo shape (see shared/eval/locomo/README.md)."""


@dataclass(frozen=True, slots=True)
class LocomoTurn:
    dia_id: str
    speaker: str
    text: str  # the turn's text with its photo caption, as ingested and as the baselines see it
    # The text line by line when its author broke it into several lines (the photo with the last);
    # empty for one line. Only the burst form (locomo_burst.py) reads it: the other forms send `text`.
    lines: tuple[str, ...] = ()
    sent_at: datetime | None = None  # when the message was sent: set by the burst form only


@dataclass(frozen=True, slots=True)
class LocomoSession:
    number: int
    occurred_at: datetime
    turns: tuple[LocomoTurn, ...]


@dataclass(frozen=True, slots=True)
class LocomoQuestion:
    number: int  # position in the sample's qa list
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]
    evidence_sessions: frozenset[int]
    # Evidence entries that name no dialogue turn (the released data has "D" alone): left out of
    # `evidence`, kept here so that the report can say how many and which.
    unreadable_evidence: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LocomoSample:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[LocomoSession, ...]
    questions: tuple[LocomoQuestion, ...]

    @property
    def user_id(self) -> str:
        return subject_token(self.sample_id)


_SESSION_TIME = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*$", re.IGNORECASE
)
# "D3:12"; also "D:11:26", a stray colon the released data has once.
_DIA_ID = re.compile(r"^D:?(\d+):(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_NOT_SUBJECT_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")


def subject_token(value: str) -> str:
    """`value` as an id usable in a NATS subject (what SessionCompleted ids must be)."""
    token = _NOT_SUBJECT_TOKEN.sub("-", value).strip("-")[:128]
    if not token:
        raise LocomoFormatError(f"cannot make an id from {value!r}")
    return token


def parse_session_time(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" → 2023-05-08 13:56 UTC (LoCoMo gives no time zone)."""
    match = _SESSION_TIME.match(text)
    if match is None:
        raise LocomoFormatError(f"unrecognised session date {text!r} (expected like '1:56 pm on 8 May, 2023')")
    hour, minute, half, day, month_name, year = match.groups()
    month = MONTH_NUMBERS.get(month_name.casefold())
    if month is None:
        raise LocomoFormatError(f"unrecognised month {month_name!r} in session date {text!r}")
    hour_24 = int(hour) % 12 + (12 if half.casefold() == "p" else 0)
    if not 1 <= int(hour) <= 12 or int(minute) > 59:
        raise LocomoFormatError(f"impossible time in session date {text!r}")
    try:
        return datetime(int(year), month, int(day), hour_24, int(minute), tzinfo=UTC)
    except ValueError as exc:
        raise LocomoFormatError(f"impossible session date {text!r}: {exc}") from exc


def dia_session(dia_id: str) -> int:
    """ "D3:12" → 3 (session 3, turn 12)."""
    match = _DIA_ID.match(dia_id.strip())
    if match is None:
        raise LocomoFormatError(f"unrecognised dialogue id {dia_id!r} (expected like 'D3:12')")
    return int(match.group(1))


def readable_evidence(raw: Iterable[Any]) -> tuple[tuple[str, ...], frozenset[int], tuple[str, ...]]:
    """The evidence dialogue ids of a question (`split_evidence`) with their sessions, and apart from
    them the entries that name no turn: one unreadable entry among ~2,000 questions must not stop a
    run, nor silently count as evidence nobody can retrieve."""
    readable: list[str] = []
    sessions: set[int] = set()
    unreadable: list[str] = []
    for dia_id in split_evidence(raw):
        match = _DIA_ID.match(dia_id)
        if match is None:
            unreadable.append(dia_id)
        else:
            readable.append(dia_id)
            sessions.add(int(match.group(1)))
    return tuple(readable), frozenset(sessions), tuple(unreadable)


def split_evidence(raw: Iterable[Any]) -> tuple[str, ...]:
    """Evidence dialogue ids; a few LoCoMo entries pack several into one string ("D8:6; D9:17")."""
    ids: list[str] = []
    for entry in raw:
        ids.extend(part for part in re.split(r"[;,\s]+", str(entry)) if part)
    return tuple(ids)


PHOTO_START = "[shares a photo: "


def _photo(turn: Mapping[str, Any]) -> str:
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    return f"{PHOTO_START}{caption}]" if caption else ""


def turn_text(turn: Mapping[str, Any]) -> str:
    """The turn's text, with the caption of a shared photo (the only trace of the image)."""
    text = " ".join(str(turn.get("text") or "").split())
    return " ".join(part for part in (text, _photo(turn)) if part)


def turn_lines(turn: Mapping[str, Any]) -> tuple[str, ...]:
    """The turn's non-empty lines, the photo's caption with the last; () when it has fewer than two."""
    lines = [line for line in (" ".join(raw.split()) for raw in str(turn.get("text") or "").splitlines()) if line]
    if len(lines) < 2:
        return ()
    photo = _photo(turn)
    return (*lines[:-1], f"{lines[-1]} {photo}" if photo else lines[-1])


def _require(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise LocomoFormatError(f"{where}: missing {key!r}")
    return mapping[key]


def parse_locomo(data: Any) -> list[LocomoSample]:
    """Samples from parsed LoCoMo JSON (a list of samples)."""
    if not isinstance(data, list):
        raise LocomoFormatError("a LoCoMo file is a JSON list of samples")
    samples: list[LocomoSample] = []
    for position, raw in enumerate(data):
        where = f"sample {position}"
        if not isinstance(raw, dict):
            raise LocomoFormatError(f"{where}: not an object")
        sample_id = str(_require(raw, "sample_id", where))
        where = f"sample {sample_id}"
        conversation = _require(raw, "conversation", where)
        speaker_a = str(_require(conversation, "speaker_a", where))
        speaker_b = str(_require(conversation, "speaker_b", where))
        sessions: list[LocomoSession] = []
        for key, turns in conversation.items():
            match = _SESSION_KEY.match(key)
            if match is None or not turns:
                continue  # dates of sessions that were never held, observations, summaries
            number = int(match.group(1))
            occurred_at = parse_session_time(str(_require(conversation, f"{key}_date_time", where)))
            parsed_turns: list[LocomoTurn] = []
            for turn in turns:
                speaker = str(_require(turn, "speaker", f"{where} {key}"))
                if speaker not in (speaker_a, speaker_b):
                    raise LocomoFormatError(
                        f"{where} {key}: speaker {speaker!r} is neither {speaker_a!r} nor {speaker_b!r}"
                    )
                text = turn_text(turn)
                if text:
                    parsed_turns.append(LocomoTurn(str(turn.get("dia_id", "")), speaker, text, turn_lines(turn)))
            if parsed_turns:
                sessions.append(LocomoSession(number, occurred_at, tuple(parsed_turns)))
        sessions.sort(key=lambda s: s.number)
        questions: list[LocomoQuestion] = []
        for number, qa in enumerate(raw.get("qa") or []):
            evidence, evidence_sessions, unreadable = readable_evidence(qa.get("evidence") or [])
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(
                LocomoQuestion(
                    number=number,
                    question=str(_require(qa, "question", f"{where} qa {number}")),
                    answer=str(answer),
                    category=int(_require(qa, "category", f"{where} qa {number}")),
                    evidence=evidence,
                    evidence_sessions=evidence_sessions,
                    unreadable_evidence=unreadable,
                )
            )
        samples.append(LocomoSample(sample_id, speaker_a, speaker_b, tuple(sessions), tuple(questions)))
    repeated = sorted(user for user, count in Counter(s.user_id for s in samples).items() if count > 1)
    if repeated:
        # One user per sample: a repeat would merge two conversations' memories and count questions twice.
        raise LocomoFormatError(f"samples given twice: {', '.join(repeated)}")
    return samples


def _one_conversation(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A conversation file of the release's `locomo10_v2` folder (speakers, sessions and `qa` at the top,
    named by its number: `41.json`) as a sample of the canonical shape, `conv-41`."""
    conversation = {key: value for key, value in data.items() if key != "qa"}
    return {"sample_id": f"conv-{path.stem}", "conversation": conversation, "qa": data["qa"]}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    except UnicodeDecodeError as exc:
        raise LocomoFormatError(f"{path}: not UTF-8 text: {exc.reason}") from exc


def load_locomo(path: Path) -> list[LocomoSample]:
    """Samples from `locomo10.json` (a JSON list of samples), from one conversation file of the release's
    per-conversation folder (`locomo10_v2/41.json`), or from such a folder (its `*.json` files)."""
    files = sorted(path.glob("*.json"), key=lambda f: (len(f.stem), f.stem)) if path.is_dir() else [path]
    if not files:
        raise LocomoFormatError(f"{path}: no .json files")
    samples: list[Any] = []
    for file in files:
        data = _read_json(file)
        if isinstance(data, dict) and "qa" in data and "speaker_a" in data:
            samples.append(_one_conversation(data, file))
        elif isinstance(data, list):
            samples.extend(data)
        else:
            raise LocomoFormatError(f"{file}: neither a list of LoCoMo samples nor one LoCoMo conversation")
    return parse_locomo(samples)


def session_id_for(sample: LocomoSample, session_number: int) -> str:
    return f"{sample.user_id}-s{session_number}"


ChatForm = Literal["chat", "group"]
"""How a conversation arrives: `chat` (speaker A is the user, B the assistant, names in `name`) or
`group` (a group chat or an imported transcript: every turn role `user`, the speaker's name only in
the text, "Caroline: ...")."""


def chat_form(value: str) -> ChatForm:
    """A `--form` option's text as a ChatForm; ValueError naming the two for anything else."""
    if value in ("chat", "group"):
        return cast(ChatForm, value)
    raise ValueError(f"--form must be 'chat' or 'group', not {value!r}")


def _message(turn: LocomoTurn, roles: Mapping[str, str], form: ChatForm) -> Message:
    if form == "group":
        return Message(role="user", content=f"{turn.speaker}: {turn.text}", ts=turn.sent_at)
    return Message(role=roles[turn.speaker], content=turn.text, name=turn.speaker, ts=turn.sent_at)  # type: ignore[arg-type]


def session_events(
    sample: LocomoSample, *, tenant_id: str, agent_id: str = "locomo-agent", form: ChatForm = "chat"
) -> list[SessionCompleted]:
    """One SessionCompleted per session; deterministic event ids, so a re-run publishes duplicates only.
    A session whose messages carry their times (the burst form) ends at its last message."""
    roles = {sample.speaker_a: "user", sample.speaker_b: "assistant"}
    events: list[SessionCompleted] = []
    for session in sample.sessions:
        events.append(
            SessionCompleted.model_validate(
                {
                    "event_id": deterministic_uuid("locomo", tenant_id, sample.sample_id, str(session.number)),
                    "tenant_id": tenant_id,
                    "user_id": sample.user_id,
                    "agent_id": agent_id,
                    "session_id": session_id_for(sample, session.number),
                    "channel": "private",
                    "started_at": session.occurred_at,
                    "ended_at": max(
                        [session.occurred_at, *(turn.sent_at for turn in session.turns if turn.sent_at is not None)]
                    ),
                    "locale": "en",
                    "messages": [_message(turn, roles, form) for turn in session.turns],
                    "metadata": {"source": "locomo", "sample_id": sample.sample_id},
                }
            )
        )
    return events
