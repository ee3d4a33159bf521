"""Procedural memory: the user's working rules ("보고서는 표부터 보여줘", "always answer in Korean").

A rule is a fact with subject `procedure` and attribute `procedure_<topic>`. The recall API's write
policy treats every `procedure_*` attribute as single-valued, so a new rule on the same topic
supersedes the old one (versioned, never overwritten) and only current rules are returned. Rules shared
by a team or the whole tenant are saved for the reserved user `SHARED_RULES_USER` with scope team/org;
a user's personal rules live under that user only, so nobody else's context can read them. Save shared
rules with `channel="group"`: a group conversation only sees what was said in a group, a private one both.

`extract_rules` finds rules stated in a user's turn with offline heuristics (English and Korean);
`select_rules` loads every rule while they fit and the most relevant ones under the budget otherwise.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from tiermem_client.sentences import split_sentences
from tiermem_client.tokens import TokenCounter

PROCEDURE_SUBJECT = "procedure"
PROCEDURE_ATTRIBUTE_PREFIX = "procedure_"
SHARED_RULES_USER = "_tenant"  # rules of the whole tenant (scope org) or a team (scope team)

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
_LIST_NUMBER = re.compile(r"^\d{1,3}\.\s+")
_LANGUAGE_NAMES = {"한국어": "korean", "한글": "korean", "영어": "english", "일본어": "japanese", "중국어": "chinese"}


@dataclass(frozen=True)
class RuleStatement:
    """A working rule and the topic it governs (rules on the same topic replace each other)."""

    topic: str
    text: str

    @property
    def attribute(self) -> str:
        return PROCEDURE_ATTRIBUTE_PREFIX + self.topic


def _sentences(text: str) -> list[str]:
    # A list number states no rule: "1. Always answer in Korean" is the rule "Always answer in Korean".
    return [rule for sentence in split_sentences(text) if (rule := _LIST_NUMBER.sub("", sentence))]


def _english_rule(sentence: str) -> RuleStatement | None:
    if sentence.endswith("?"):
        return None
    if _EN_LANGUAGE.search(sentence) and _EN_MARKERS.search(sentence):
        return RuleStatement("answer_language", sentence)
    if not _EN_MARKERS.search(sentence) or (_EN_STATEMENT.search(sentence) and not _EN_ADDRESSED.search(sentence)):
        return None
    words = [w.casefold() for w in re.findall(r"[A-Za-z]+", sentence)]
    content = [w for w in words if len(w) >= 3 and w not in _EN_SKIP]
    if not content:
        return None
    topic = content[0][:-1] if content[0].endswith("s") and len(content[0]) > 3 else content[0]
    return RuleStatement(topic, sentence)


def _korean_rule(sentence: str) -> RuleStatement | None:
    if sentence.endswith("?") or not re.search(r"[가-힣]", sentence):
        return None
    language = _KO_LANGUAGE.search(sentence)
    if language:
        return RuleStatement("answer_language", sentence)
    marked = _KO_MARKERS.search(sentence) is not None
    if not (_KO_IMPERATIVE.search(sentence) or (marked and _KO_PLAIN_ENDING.search(sentence))):
        return None
    topic = _KO_TOPIC.search(sentence)
    if topic and topic.group(1) not in _KO_SELF:
        return RuleStatement(topic.group(1), sentence)
    if marked:
        return RuleStatement(_text_topic(sentence), sentence)
    return None  # a one-off request ("이거 좀 봐줘"), not a standing rule


def extract_rules(text: str) -> list[RuleStatement]:
    """The standing rules a user states in `text` (offline heuristics, English and Korean)."""
    found: list[RuleStatement] = []
    for sentence in _sentences(text):
        rule = _korean_rule(sentence) or _english_rule(sentence)
        if rule is not None:
            found.append(rule)
    return found


def _text_topic(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text.strip()).casefold()
    return re.sub(r"[^\w]+", "_", folded).strip("_")[:60] or "rule"


def rule_topic(text: str) -> str:
    """The topic of a rule given without one: what `extract_rules` would pick, else the text itself."""
    stripped = text.strip()
    rule = _korean_rule(stripped) or _english_rule(stripped)
    return rule.topic if rule is not None else _text_topic(stripped)


def _bigrams(text: str) -> set[str]:
    folded = re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).casefold())
    return {folded[i : i + 2] for i in range(len(folded) - 1)}


def relevance(rule: str, query: str) -> float:
    """Character-bigram overlap (works for Korean without a morphological analyser)."""
    rule_grams, query_grams = _bigrams(rule), _bigrams(query)
    if not rule_grams or not query_grams:
        return 0.0
    return len(rule_grams & query_grams) / len(rule_grams)


@dataclass
class SelectedRules:
    rules: list[str]
    tokens: int
    left_out: list[str] = field(default_factory=list)
    ranked: bool = False  # False: every rule fitted and all were loaded


def rule_line(rule: str) -> str:
    return f"- {rule}"


def select_rules(
    rules: Sequence[str], query: str, budget: int, counter: TokenCounter, *, min_relevance: float = 0.15
) -> SelectedRules:
    """All rules while they fit in `budget` tokens; otherwise the ones relevant to `query`, best first,
    as many as fit. Irrelevant rules are left out rather than filling the budget."""
    costs = [counter.count_tokens(rule_line(rule)) for rule in rules]
    if sum(costs) <= budget:
        return SelectedRules(rules=list(rules), tokens=sum(costs))
    scored = sorted(range(len(rules)), key=lambda i: relevance(rules[i], query), reverse=True)
    chosen: list[int] = []
    used = 0
    for index in scored:
        if relevance(rules[index], query) >= min_relevance and used + costs[index] <= budget:
            chosen.append(index)
            used += costs[index]
    kept = set(chosen)
    return SelectedRules(
        rules=[rules[i] for i in chosen],
        tokens=used,
        left_out=[rule for i, rule in enumerate(rules) if i not in kept],
        ranked=True,
    )
