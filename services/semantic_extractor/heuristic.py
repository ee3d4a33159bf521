"""The offline (heuristic) extractor: deterministic extraction without an LLM.

Who a fact is about is decided before anything else (DESIGN.md §3): "my friend uses R" and
"제 친구는 R을 써요" yield a fact about the friend (subject "friend" / "친구"), never about the user.
Input text may be "Name: content" lines; first-person statements in a line are about that speaker,
and the speaker is the user when the name is one of `user_speaker_names` (or a user role word).
Unprefixed text is taken to be in the user's voice (a user message or an extractive summary).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal

from services.common.domain.facts import USER_SUBJECT, normalise_text_key
from services.common.domain.sentences import split_sentences
from services.semantic_extractor.fact_text import primary_language
from services.semantic_extractor.gazetteers import name_keys
from services.semantic_extractor.heuristic_chat_en import ChatState, introduce_names, prepare_sentence
from services.semantic_extractor.heuristic_chat_ko import korean_chat_sentence, korean_introductions
from services.semantic_extractor.heuristic_chat_relations import chat_relations_en
from services.semantic_extractor.heuristic_context import ExtractionContext, Speaker
from services.semantic_extractor.heuristic_en import english_sentence, non_initial_capitalised
from services.semantic_extractor.heuristic_ko import is_korean_question, korean_sentence
from services.semantic_extractor.heuristic_ko_facts import korean_construction_facts
from services.semantic_extractor.korean_morphology import HANGUL, korean_morphemes
from services.semantic_extractor.schema import ExtractionOutput

_SPEAKER_LINE = re.compile(r"^\s*(?P<name>[^\W\d_][\w.'’ -]{0,40}?)\s*:\s+(?P<content>\S.*)$")
_NOT_SPEAKERS = name_keys(
    "note", "notes", "summary", "todo", "q", "a", "answer", "question", "update", "decision", "decisions",
    "action", "actions", "example", "warning", "error", "tip", "ps", "p.s", "re", "fyi", "요약", "참고", "결정",
)  # fmt: skip
_USER_ROLES = name_keys("user", "human", "me", "사용자", "유저")
_ASSISTANT_ROLES = name_keys("assistant", "ai", "bot", "system", "agent", "tool", "model", "어시스턴트", "챗봇")


def heuristic_extract(
    text: str,
    language: str,
    *,
    user_display_name: str | None = None,
    user_speaker_names: Collection[str] = (),
) -> ExtractionOutput:
    """Offline extraction: proper nouns (English spans, Korean NNP/SL via Kiwi), co-occurrence and
    pattern relations, and first-person pattern facts with a subject check. Deterministic."""
    user_names = {name for name in (*user_speaker_names, user_display_name) if name}
    parsed = [_parse_line(line) for line in text.splitlines() if line.strip()]
    people: dict[str, str] = {}
    for speaker_name, _content in parsed:
        if speaker_name is not None and _role_of(speaker_name) is None:
            people.setdefault(normalise_text_key(speaker_name), speaker_name)
    for name in user_names:
        people.setdefault(normalise_text_key(name), name)
    context = ExtractionContext(
        user_keys=frozenset(normalise_text_key(name) for name in user_names) | _USER_ROLES,
        people=people,
        user_display_name=user_display_name,
        language=primary_language(language),
    )
    for display in people.values():
        if not context.is_user(display) or display == user_display_name:
            context.add_entity(display, "person", 3)

    non_initial_caps = non_initial_capitalised(content for _speaker, content in parsed)
    chat = ChatState()
    for speaker_name, content in parsed:
        speaker = _speaker_subject(speaker_name, context)
        for sentence in split_sentences(content):
            if HANGUL.search(sentence):
                tokens = korean_morphemes(sentence)
                korean_introductions(tokens, speaker, context, chat)
                korean_sentence(sentence, speaker, context, tokens)
                if not is_korean_question(sentence, tokens):
                    korean_construction_facts(sentence, tokens, speaker, context)
                    korean_chat_sentence(sentence, tokens, speaker, context, chat)
            else:
                # Chat is typed in lowercase with subjects dropped: known names are capitalised, the
                # speaker put back and he/she resolved before the English reader runs.
                introduce_names(sentence, speaker, context, chat)
                prepared = prepare_sentence(sentence, speaker, context, chat)
                english_sentence(prepared, speaker, context, non_initial_caps)
                if not prepared.rstrip().endswith("?"):
                    chat_relations_en(prepared, speaker, context)
    return context.output()


def _parse_line(line: str) -> tuple[str | None, str]:
    match = _SPEAKER_LINE.match(line)
    if match is None:
        return None, line.strip()
    name = match.group("name").strip()
    if normalise_text_key(name) in _NOT_SPEAKERS or len(name.split()) > 4:
        return None, line.strip()
    return name, match.group("content").strip()


def _role_of(speaker: str) -> Literal["user", "assistant"] | None:
    key = normalise_text_key(speaker)
    if key in _USER_ROLES:
        return "user"
    if key in _ASSISTANT_ROLES:
        return "assistant"
    return None


def _speaker_subject(speaker: str | None, context: ExtractionContext) -> Speaker:
    if speaker is None:
        return Speaker(USER_SUBJECT)
    role = _role_of(speaker)
    if role == "assistant":
        return Speaker(None)
    if role == "user" or context.is_user(speaker):
        return Speaker(USER_SUBJECT)
    return Speaker(speaker)
