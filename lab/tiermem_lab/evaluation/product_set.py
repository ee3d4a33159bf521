"""The product question set (data/product_questions.json): its schema, how it is loaded and sliced, and
the events it is ingested as.

The set is hand-written chat between users and their assistant, as an agent sees it: short messages,
bursts of several messages from one side, typos, slang, emoji, people called by nicknames, time said
relative to the session ("yesterday", "next week", "다음주"). Every user belongs to one split:
`dev` may be looked at and tuned on; `test` is held out (never used to choose anything).

Each question is either answerable (`answer`, and the `evidence` sessions that hold it; `stale` names a
session whose older answer a later session revised) or not (`answerable: false`: the asked detail was
never said, `missing` names it, `topic` names the sessions that talk about the topic).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Literal, Self, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts import Message, SessionCompleted
from contracts.events import SubjectToken
from services.common.domain.ids import deterministic_uuid
from tiermem_lab.evaluation.locomo import ChatForm, LocomoSample, LocomoSession, LocomoTurn

DEFAULT_PRODUCT_SET = Path(__file__).resolve().parent / "data" / "product_questions.json"

Role = Literal["user", "assistant"]
Split = Literal["dev", "test"]
SplitChoice = Literal["dev", "test", "all"]
Language = Literal["en", "ko"]
QuestionKind = Literal["decision", "changed", "number", "date", "person", "pet", "preference", "plan"]
SPLITS: tuple[Split, ...] = get_args(Split)
QUESTION_KINDS: tuple[QuestionKind, ...] = get_args(QuestionKind)
ASSISTANT_NAME = "Assistant"
# Messages of a session are sent this far apart (the session's own clock for relative time).
MESSAGE_SPACING = timedelta(seconds=40)


class ProductSetFormatError(ValueError):
    """The question set file is malformed; the message says where."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProductSession(_Frozen):
    id: SubjectToken
    started_at: AwareDatetime
    messages: tuple[tuple[Role, str], ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _messages_have_text(self) -> Self:
        empty = [index for index, (_, text) in enumerate(self.messages) if not text.strip()]
        if empty:
            raise ValueError(f"session {self.id}: empty messages at {empty}")
        return self


class ProductQuestion(_Frozen):
    id: SubjectToken
    question: str = Field(min_length=1)
    kind: QuestionKind
    answerable: bool = True
    answer: str | None = None  # answerable: the expected answer
    evidence: tuple[str, ...] = ()  # answerable: the sessions holding the answer
    stale: tuple[str, ...] = ()  # answerable: sessions with an older answer a later session revised
    missing: str | None = None  # not answerable: the detail that was never said
    topic: tuple[str, ...] = ()  # not answerable: the sessions about its topic

    @model_validator(mode="after")
    def _one_shape(self) -> Self:
        if self.answerable:
            if not self.answer or not self.evidence or self.missing is not None or self.topic:
                raise ValueError(f"question {self.id}: an answerable question has answer and evidence only")
        elif not self.missing or not self.topic or self.answer is not None or self.evidence or self.stale:
            raise ValueError(f"question {self.id}: a question with answerable=false has missing and topic only")
        if set(self.stale) & set(self.evidence):
            raise ValueError(f"question {self.id}: a session cannot be both evidence and stale")
        return self

    @property
    def sessions(self) -> tuple[str, ...]:
        """The sessions the question is about: its evidence, or for one not answerable, its topic."""
        return self.evidence if self.answerable else self.topic


class ProductUser(_Frozen):
    user_id: SubjectToken
    display_name: str = Field(min_length=1)
    language: Language
    split: Split
    sessions: tuple[ProductSession, ...] = Field(min_length=1)
    questions: tuple[ProductQuestion, ...]

    @model_validator(mode="after")
    def _references_resolve(self) -> Self:
        ids = [s.id for s in self.sessions]
        if len(set(ids)) != len(ids):
            raise ValueError(f"user {self.user_id}: session ids repeat")
        times = [s.started_at for s in self.sessions]
        if times != sorted(times):
            raise ValueError(f"user {self.user_id}: sessions are not in time order")
        known = set(ids)
        for question in self.questions:
            unknown = sorted({*question.sessions, *question.stale} - known)
            if unknown:
                raise ValueError(f"user {self.user_id} question {question.id}: no session {', '.join(unknown)}")
        return self

    def number_of(self, session_id: str) -> int:
        """The session's position, from 1 (the number the baselines rank it by)."""
        return [s.id for s in self.sessions].index(session_id) + 1


class ProductSet(_Frozen):
    name: str
    version: int
    description: str
    kinds: dict[str, str]
    users: tuple[ProductUser, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids_unique(self) -> Self:
        if set(self.kinds) != set(QUESTION_KINDS):
            raise ValueError(f"kinds must describe exactly {', '.join(QUESTION_KINDS)}")
        for label, ids in (
            ("user", [u.user_id for u in self.users]),
            ("session", [s.id for u in self.users for s in u.sessions]),
            ("question", [q.id for u in self.users for q in u.questions]),
        ):
            repeated = sorted(value for value, count in Counter(ids).items() if count > 1)
            if repeated:
                raise ValueError(f"{label} ids repeat: {', '.join(repeated)}")
        return self


def load_product_set(path: Path = DEFAULT_PRODUCT_SET) -> ProductSet:
    """The set at `path`; ProductSetFormatError naming the file and the first problem otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProductSetFormatError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    except UnicodeDecodeError as exc:
        raise ProductSetFormatError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    try:
        return ProductSet.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise ProductSetFormatError(f"{path}: {where}: {first['msg']}") from exc


def select_users(
    product_set: ProductSet,
    split: SplitChoice = "all",
    user_ids: Sequence[str] = (),
    max_questions: int | None = None,
) -> list[ProductUser]:
    """The users of `split` (all of them, or those named); with `max_questions`, each keeps its first
    that many answerable questions and its first that many not in memory (a quick run sees both)."""
    known = {u.user_id for u in product_set.users}
    unknown = sorted(set(user_ids) - known)
    if unknown:
        raise ProductSetFormatError(f"no user {', '.join(unknown)} in the set (users: {', '.join(sorted(known))})")
    chosen = [
        u for u in product_set.users if (split == "all" or u.split == split) and (not user_ids or u.user_id in user_ids)
    ]
    if not chosen:
        raise ProductSetFormatError(f"no user of split {split!r} among {', '.join(user_ids)}")
    if max_questions is None:
        return chosen
    return [u.model_copy(update={"questions": _first_of_each(u.questions, max_questions)}) for u in chosen]


def _first_of_each(questions: Sequence[ProductQuestion], count: int) -> tuple[ProductQuestion, ...]:
    answerable = [q for q in questions if q.answerable][:count]
    unanswerable = [q for q in questions if not q.answerable][:count]
    return tuple(q for q in questions if q in answerable or q in unanswerable)


def _speaker(user: ProductUser, role: str) -> str:
    return user.display_name if role == "user" else ASSISTANT_NAME


def as_sample(user: ProductUser) -> LocomoSample:
    """The user's sessions in the shape the baselines rank (sessions numbered from 1; no questions)."""
    sessions = tuple(
        LocomoSession(
            number=number,
            occurred_at=session.started_at,
            turns=tuple(
                LocomoTurn(f"{session.id}:{index}", _speaker(user, role), text)
                for index, (role, text) in enumerate(session.messages)
            ),
        )
        for number, session in enumerate(user.sessions, start=1)
    )
    return LocomoSample(user.user_id, user.display_name, ASSISTANT_NAME, sessions, ())


def _message(user: ProductUser, role: Role, text: str, index: int, session: ProductSession, form: ChatForm) -> Message:
    sent = session.started_at + MESSAGE_SPACING * index
    if form == "group":
        return Message(role="user", content=f"{_speaker(user, role)}: {text}", ts=sent)
    return Message(role=role, content=text, name=_speaker(user, role), ts=sent)


def session_events(user: ProductUser, *, tenant_id: str, form: ChatForm = "chat") -> list[SessionCompleted]:
    """One SessionCompleted per session, every message with its own time; deterministic event ids."""
    events: list[SessionCompleted] = []
    for session in user.sessions:
        messages = [
            _message(user, role, text, index, session, form) for index, (role, text) in enumerate(session.messages)
        ]
        events.append(
            SessionCompleted(
                event_id=deterministic_uuid("product", tenant_id, user.user_id, session.id, form),
                tenant_id=tenant_id,
                user_id=user.user_id,
                agent_id="product-agent",
                session_id=session.id,
                channel="private",
                started_at=session.started_at,
                ended_at=messages[-1].ts or session.started_at,
                locale=user.language,
                messages=messages,
                metadata={"source": "product_questions", "split": user.split},
            )
        )
    return events
