"""The burst form of a LoCoMo conversation (`--form burst`): the same conversation as people type it in a
messaging app. LoCoMo's turns are long and well formed; real chat arrives as bursts of short messages.
So each turn is sent as its sentences (and its lines), one message each, by the same speaker, with the
time it was sent. The split is a transformation of the sample, not of the ingestion only: the
baselines rank the same messages (a 4-turn passage over bursts is 4 short messages), and every
message keeps its turn's dia_id, so evidence still names its session.

Message times: the session's time for its first message, then `SECONDS_BETWEEN_MESSAGES` between the
messages one speaker types for one turn and `SECONDS_BETWEEN_TURNS` before the first message of the
next turn (reading the other's message and answering). Plain constants, so that every run sends the
same times; they are in the report's meta.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Literal

from tiermem_lab.evaluation.locomo import PHOTO_START, ChatForm, LocomoSample, LocomoSession, LocomoTurn

SECONDS_BETWEEN_MESSAGES = 5
SECONDS_BETWEEN_TURNS = 60

LocomoForm = Literal["chat", "group", "burst"]
"""How `tiermem eval locomo` sends a conversation: the two chat forms (`locomo.ChatForm`), or `burst`:
the chat form with every turn split into its sentences, each a message with its time."""
LOCOMO_FORMS: tuple[LocomoForm, ...] = ("chat", "group", "burst")

# Sentence-final punctuation: ASCII . ! ? (a run of them, "!!" or "...") and closing quotes or
# brackets, followed by a space (so "3.5", "e.g" and URLs stay whole); the full-width and CJK marks
# end a sentence even with no space after (Chinese and Japanese write none).
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s)|[。．｡！？]+[\"'”’)\]」』）]*")
# A period after a title or a Latin abbreviation (a closed word class) does not end a sentence.
_ABBREVIATION = re.compile(r"\b(?:mr|mrs|ms|dr|prof|st|jr|sr|vs|e\.g|i\.e)\.$", re.IGNORECASE)


def locomo_form(value: str) -> LocomoForm:
    """A `--form` option's text as a LocomoForm; ValueError naming the three for anything else."""
    if value in LOCOMO_FORMS:
        return value
    raise ValueError(f"--form must be 'chat', 'group' or 'burst', not {value!r}")


def ingest_form(form: LocomoForm) -> ChatForm:
    """The chat form the sessions are published in: burst messages are labelled as in the chat form."""
    return "group" if form == "group" else "chat"


def split_sentences(text: str) -> list[str]:
    """`text`'s sentences in order, whitespace at their ends removed, none empty."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.group() == "." and _ABBREVIATION.search(text, start, match.end()):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def _split_photo(line: str) -> tuple[str, str]:
    """(the line without its photo, the photo "[shares a photo: ...]" or "")."""
    at = line.rfind(PHOTO_START)
    if at < 0 or not line.endswith("]"):
        return line, ""
    return line[:at].strip(), line[at:]


def turn_messages(turn: LocomoTurn) -> list[str]:
    """The messages one turn is typed as: each line's sentences; a shared photo goes with the sentence
    it follows (alone when the turn is only the photo). Never an empty message."""
    messages: list[str] = []
    for line in turn.lines or (turn.text,):
        body, photo = _split_photo(" ".join(line.split()))
        sentences = split_sentences(body)
        if photo:
            sentences = [*sentences[:-1], f"{sentences[-1]} {photo}"] if sentences else [photo]
        messages.extend(sentences)
    return messages


def burst_session(session: LocomoSession) -> LocomoSession:
    """The session as bursts: each turn's messages in order, each keeping the turn's dia_id and
    speaker, with its time (module doc)."""
    turns: list[LocomoTurn] = []
    sent_at = session.occurred_at
    for turn in session.turns:
        for index, text in enumerate(turn_messages(turn)):
            if turns:
                sent_at += timedelta(seconds=SECONDS_BETWEEN_MESSAGES if index else SECONDS_BETWEEN_TURNS)
            turns.append(LocomoTurn(turn.dia_id, turn.speaker, text, sent_at=sent_at))
    return LocomoSession(session.number, session.occurred_at, tuple(turns))


def burst_sample(sample: LocomoSample) -> LocomoSample:
    """The sample in the burst form; its questions and session dates unchanged. A session with no
    text left is dropped, as the parser drops it."""
    sessions = tuple(s for s in (burst_session(session) for session in sample.sessions) if s.turns)
    return dataclasses.replace(sample, sessions=sessions)


def sample_form(sample: LocomoSample, form: LocomoForm) -> LocomoSample:
    """The sample as `form` sends it: split into bursts for `burst`, unchanged otherwise."""
    return burst_sample(sample) if form == "burst" else sample
