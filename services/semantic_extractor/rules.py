"""Working rules stated by the user ("보고서는 표부터 보여줘", "always answer in Korean", "from now on …")
become procedure facts: subject `procedure`, attribute `procedure_<topic>`.

The attribute is single-valued under the write policy, so a later rule on the same topic supersedes the
earlier one (versioned, never overwritten) and only current rules are loaded into a prompt. The topic
must be the same whichever path saw the rule, so this is the same recognition, sentence for sentence,
as the client's `tiermem_client.procedures.extract_rules` (a test compares the two on a shared
corpus): a rule saved explicitly by a chat system and the same rule extracted here land on one fact.

Only the user's own messages count (an assistant saying "I will always answer in Korean" states no
rule of the user's), and questions or one-off requests ("이거 좀 봐줘") are not rules. Deterministic and
offline: it runs on both extraction paths, so a rule never depends on a model noticing it. Pure, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from contracts import SessionCompleted
from services.common.domain.fact_attributes import PROCEDURE_ATTRIBUTE_PREFIX
from services.common.domain.sentences import split_sentences
from services.semantic_extractor.schema import ExtractedFact, ExtractionOutput

PROCEDURE_SUBJECT = "procedure"

_EN_MARKERS = re.compile(r"\b(always|never|from now on|going forward|in (the )?future|by default|every time)\b", re.I)
_EN_LANGUAGE = re.compile(
    r"\b(answer|reply|respond|write|speak|talk)\w*\b.*\bin (korean|english|japanese|chinese|french|german|spanish)\b",
    re.I,
)
_EN_SKIP = {
    "always", "never", "please", "from", "now", "going", "forward", "future", "default", "every", "time", "the",
    "start", "begin", "use", "give", "show", "put", "make", "write", "send", "keep", "don", "not", "ever", "with",
    "your", "my", "me", "for", "and", "when", "you", "any", "all", "first", "then", "answer", "reply",
    "want", "would", "like", "should", "must", "need", "could",
}  # fmt: skip
_KO_LANGUAGE = re.compile(r"(한국어|영어|일본어|중국어|한글)로\s*(답|대답|말|써|작성|응답)")
_KO_MARKERS = re.compile(r"(항상|앞으로|언제나|매번|절대|무조건)")
# "해"/"해요" also end plain statements ("나는 커피 좋아해"): they make a rule only with a marker (항상, 앞으로).
_KO_IMPERATIVE = re.compile(r"(줘|줘요|주세요|하세요|하지\s*마|마세요|말아\s*줘|말아요)[.!~ ]*$")
_KO_PLAIN_ENDING = re.compile(r"(해|해요)[.!~ ]*$")
_KO_SELF = {"나", "저", "내", "제", "우리", "저희"}  # "나는 …" states something about the user, not a rule
# A sentence about someone ("I always walk the dog", "My dog never barks") is a habit, not a rule for the
# assistant, unless it is addressed to it ("I want you to always …") or says what should be done.
_EN_STATEMENT = re.compile(r"^\s*(i|i'm|we|he|she|they|it|my|our|his|her|their)\b", re.I)
_EN_ADDRESSED = re.compile(r"\b(you|your|should|must|please)\b", re.I)
_KO_TOPIC = re.compile(r"^\s*(?:앞으로\s+|항상\s+)?([가-힣A-Za-z0-9]{1,12}?)(?:은|는)\s")
_HANGUL = re.compile(r"[가-힣]")
_LIST_NUMBER = re.compile(r"^\d{1,3}\.\s+")


@dataclass(frozen=True)
class StatedRule:
    """A working rule and the topic it governs (rules on the same topic replace each other)."""

    topic: str
    text: str

    @property
    def attribute(self) -> str:
        return PROCEDURE_ATTRIBUTE_PREFIX + self.topic


def _sentences(text: str) -> list[str]:
    # A list number states no rule: "1. Always answer in Korean" is the rule "Always answer in Korean".
    return [rule for sentence in split_sentences(text) if (rule := _LIST_NUMBER.sub("", sentence))]


def _english_rule(sentence: str) -> StatedRule | None:
    if sentence.endswith("?"):
        return None
    if _EN_LANGUAGE.search(sentence) and _EN_MARKERS.search(sentence):
        return StatedRule("answer_language", sentence)
    if not _EN_MARKERS.search(sentence) or (_EN_STATEMENT.search(sentence) and not _EN_ADDRESSED.search(sentence)):
        return None
    words = [w.casefold() for w in re.findall(r"[A-Za-z]+", sentence)]
    content = [w for w in words if len(w) >= 3 and w not in _EN_SKIP]
    if not content:
        return None
    topic = content[0][:-1] if content[0].endswith("s") and len(content[0]) > 3 else content[0]
    return StatedRule(topic, sentence)


def _korean_rule(sentence: str) -> StatedRule | None:
    if sentence.endswith("?") or not _HANGUL.search(sentence):
        return None
    if _KO_LANGUAGE.search(sentence):
        return StatedRule("answer_language", sentence)
    marked = _KO_MARKERS.search(sentence) is not None
    if not (_KO_IMPERATIVE.search(sentence) or (marked and _KO_PLAIN_ENDING.search(sentence))):
        return None
    topic = _KO_TOPIC.search(sentence)
    if topic and topic.group(1) not in _KO_SELF:
        return StatedRule(topic.group(1), sentence)
    if marked:
        return StatedRule(_text_topic(sentence), sentence)
    return None  # a one-off request ("이거 좀 봐줘"), not a standing rule


def _text_topic(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text.strip()).casefold()
    return re.sub(r"[^\w]+", "_", folded).strip("_")[:60] or "rule"


def stated_rules(text: str) -> list[StatedRule]:
    """The standing rules stated in one user message (English and Korean), in order."""
    found: list[StatedRule] = []
    for sentence in _sentences(text):
        rule = _korean_rule(sentence) or _english_rule(sentence)
        if rule is not None:
            found.append(rule)
    return found


def rules_in_messages(user_messages: Iterable[str]) -> list[StatedRule]:
    """The rules of a session, one per topic: within a session the user's last word on a topic wins."""
    latest: dict[str, StatedRule] = {}
    for message in user_messages:
        for rule in stated_rules(message):
            latest.pop(rule.topic, None)
            latest[rule.topic] = rule
    return list(latest.values())


def user_messages(session: SessionCompleted | None) -> list[str]:
    """What the user said in the session (nothing when the raw session is gone: a summary is not the
    user's voice, and a rule must be the user's own words)."""
    return [message.content for message in session.messages if message.role == "user"] if session else []


def with_stated_rules(extraction: ExtractionOutput, user_messages: Iterable[str]) -> ExtractionOutput:
    """The extraction plus a procedure fact per rule the user stated (replacing any procedure fact the
    model produced for the same topic, so the topic, and with it the supersession, is always ours)."""
    rules = rules_in_messages(user_messages)
    if not rules:
        return extraction
    topics = {rule.attribute for rule in rules}
    kept = [fact for fact in extraction.facts if not (fact.subject == PROCEDURE_SUBJECT and fact.attribute in topics)]
    facts = [
        ExtractedFact(
            subject=PROCEDURE_SUBJECT, attribute=rule.attribute, value=rule.text, text=rule.text, volatility="low"
        )
        for rule in rules
    ]
    return extraction.model_copy(update={"facts": kept + facts})
