"""The English reader of the heuristic extractor: capitalised name spans, pattern relations between
them, and first-person pattern facts with a subject check ("my friend uses R" is the friend's).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from services.common.domain.facts import USER_SUBJECT, normalise_text_key, transient_reason
from services.common.domain.text import split_sentences
from services.semantic_extractor.gazetteers import EN_RELATION_NOUNS, TECH_LOWERCASE_OK, TECHNOLOGIES, name_keys
from services.semantic_extractor.heuristic_context import (
    MULTI_VALUE_ATTRIBUTES,
    ExtractionContext,
    Speaker,
    cooccurrence,
    guess_type,
    is_capitalised,
    known_name,
    record_fact,
)
from services.semantic_extractor.korean_morphology import HANGUL
from services.semantic_extractor.schema import EntityType

_EN_STOP_CAPITALISED = name_keys(
    "I", "I'm", "I've", "I'd", "I'll", "Im", "A", "An", "The", "This", "That", "These", "Those", "It", "Its",
    "It's", "My", "Mine", "We", "Our", "Us", "You", "Your", "Yours", "He", "She", "They", "Them", "His", "Her",
    "Their", "What", "When", "Where", "Why", "How", "Who", "Which", "Whose", "Is", "Are", "Was", "Were", "Do",
    "Did", "Does", "Can", "Could", "Would", "Should", "Will", "Shall", "May", "Might", "Must", "Have", "Has",
    "Had", "Also", "Just", "Really", "Maybe", "Perhaps", "Today", "Tomorrow", "Yesterday", "Tonight", "Now",
    "Then", "There", "Here", "Hey", "Hi", "Hello", "Bye", "Goodbye", "Thanks", "Thank", "Wow", "Oh", "Ah", "Yes",
    "Yeah", "Yep", "Yup", "No", "Nope", "Not", "OK", "Okay", "Well", "So", "And", "But", "Or", "If", "Because",
    "As", "At", "In", "On", "Of", "For", "From", "To", "With", "By", "About", "After", "Before", "Good", "Great",
    "Nice", "Cool", "Awesome", "Amazing", "Sure", "Please", "Let", "Let's", "Anyway", "Btw", "Gonna", "Totally",
    "Absolutely", "Definitely", "Sorry", "Congrats", "Congratulations", "Lol", "Haha", "Dear", "Love", "Hope",
    "Glad", "Happy", "Sounds", "Looks", "That's", "There's", "Here's", "What's", "Every", "All", "Some", "Any",
    "Most", "Many", "One", "Two", "Both", "Each", "Other", "Another", "Such", "Same", "Last", "Next", "First",
    "Still", "Even", "Only", "Very", "Too", "Much", "More", "Less", "Once", "Again", "Always", "Never", "Often",
    "Sometimes", "Usually", "Actually", "Basically", "Honestly", "Seriously", "Exactly", "Right", "True", "Fine",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February",
    "March", "April", "June", "July", "August", "September", "October", "November", "December", "LOL", "OMG",
    "BTW", "FYI", "ASAP", "TBH", "IMO", "IMHO", "AM", "PM", "Mr", "Mrs", "Ms", "Dr", "Prof", "Mon", "Tue",
    "Tues", "Wed", "Thu", "Thur", "Thurs", "Fri", "Sat", "Sun", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug",
    "Sep", "Sept", "Oct", "Nov", "Dec", "Woohoo", "Yay", "Aww", "Aw", "Omg", "Ooh", "Whoa", "Hmm", "Ugh", "Hah",
    "Wowza", "Yikes", "Phew", "Gosh", "Nah", "Congrats", "Cheers",
)  # fmt: skip
_EN_CONNECTORS = frozenset({"of", "de", "la", "von", "van", "der", "du", "del", "da", "di", "the", "and", "&"})
_EN_TOKEN = re.compile(r"[A-Za-z0-9\u00c0-\u024f][A-Za-z0-9\u00c0-\u024f.+#&'’-]*")
_DOTTED_ACRONYM = re.compile(r"(?:[A-Za-z]\.){2,}")


def _clean_en_token(raw: str) -> str:
    if _DOTTED_ACRONYM.fullmatch(raw):
        return raw
    token = re.sub(r"(?:'s|’s|')$", "", raw)
    return token.rstrip(".-'’")


def _is_acronym(token: str) -> bool:
    letters = token.replace(".", "")
    return len(letters) >= 2 and letters.isalpha() and letters.isupper()


def non_initial_capitalised(contents: Any) -> frozenset[str]:
    """Capitalised words seen somewhere not at the start of a sentence: proper nouns for sure, so
    the same word at a sentence start is one too."""
    seen: set[str] = set()
    for content in contents:
        for sentence in split_sentences(content):
            for index, match in enumerate(_EN_TOKEN.finditer(sentence)):
                token = _clean_en_token(match.group())
                if index > 0 and is_capitalised(token) and normalise_text_key(token) not in _EN_STOP_CAPITALISED:
                    seen.add(normalise_text_key(token))
    return frozenset(seen)


@dataclass(frozen=True, slots=True)
class _Mention:
    name: str
    start: int
    end: int
    hint: EntityType | None = None  # "Hey Mel!": a name after a greeting is a person


_GREETINGS = frozenset({"hey", "hi", "hello", "thanks", "thank", "bye", "dear", "congrats", "congratulations", "yo"})


def _english_entities(sentence: str, context: ExtractionContext, non_initial_caps: frozenset[str]) -> list[_Mention]:
    tokens = [(m.start(), m.end(), _clean_en_token(m.group())) for m in _EN_TOKEN.finditer(sentence)]
    mentions: list[_Mention] = []
    index = 0
    while index < len(tokens):
        token = tokens[index][2]
        if not _en_name_token(token):
            index += 1
            continue
        span = [index]
        probe = index + 1
        while probe < len(tokens):
            gap = sentence[tokens[probe - 1][1] : tokens[probe][0]]
            if gap.strip() or not gap:
                break
            word = tokens[probe][2]
            if _en_name_token(word) or (word[:1].isdigit() and word.isalnum()):
                span.append(probe)
                probe += 1
                continue
            if word.casefold() in _EN_CONNECTORS - {"and", "&"} and probe + 1 < len(tokens):
                after = tokens[probe + 1][2]
                if is_capitalised(after) and normalise_text_key(after) not in _EN_STOP_CAPITALISED:
                    span.extend([probe, probe + 1])
                    probe += 2
                    continue
            break
        index = probe
        # Trim sentence-glue words from both ends ("Hey Mel" → "Mel", "Thanks Caroline" → "Caroline").
        while span and normalise_text_key(tokens[span[0]][2]) in _EN_STOP_CAPITALISED:
            span.pop(0)
        while span and normalise_text_key(tokens[span[-1]][2]) in _EN_STOP_CAPITALISED:
            span.pop()
        if not span:
            continue
        name = sentence[tokens[span[0]][0] : tokens[span[-1]][1]]
        name = _clean_en_token(name) if len(span) == 1 else re.sub(r"(?:'s|’s)$", "", name)
        key = normalise_text_key(name)
        starts_sentence = not sentence[: tokens[span[0]][0]].strip(" \"'“‘(-")
        first_key = normalise_text_key(tokens[span[0]][2])
        if (
            starts_sentence
            and len(span) > 1
            and not known_name(first_key, context)
            and first_key not in non_initial_caps
        ):
            # "Remember Jon", "Go Jon": a capitalised first word is a sentence start, not part of the name.
            span.pop(0)
            name = sentence[tokens[span[0]][0] : tokens[span[-1]][1]]
            name = _clean_en_token(name) if len(span) == 1 else re.sub(r"(?:'s|’s)$", "", name)
            key = normalise_text_key(name)
            starts_sentence = False
        known = known_name(key, context)
        if starts_sentence and len(span) == 1 and not known and key not in non_initial_caps:
            continue
        if len(name) == 1 and key not in TECHNOLOGIES:
            continue
        previous = tokens[span[0] - 1][2].casefold() if span[0] > 0 else ""
        hint: EntityType | None = "person" if previous in _GREETINGS else None
        mentions.append(_Mention(name, tokens[span[0]][0], tokens[span[-1]][1], hint))
    return mentions


def _en_name_token(token: str) -> bool:
    if not token:
        return False
    key = normalise_text_key(token)
    if key in _EN_STOP_CAPITALISED and not _is_acronym(token):
        return False
    if key in {"lol", "omg", "btw", "fyi", "asap", "tbh", "imo", "imho", "am", "pm", "ok"}:
        return False
    return is_capitalised(token) or key in TECH_LOWERCASE_OK


_EN_REL = "|".join(re.escape(noun) for noun in sorted(EN_RELATION_NOUNS, key=len, reverse=True))
_EN_SUBJECT = (
    r"(?P<subj>\bI\b|\b[Ww]e\b|\b[Tt]he user\b"
    r"|\b[Mm]y\s+(?:(?:best|close|old|good|younger|older|little|big|new)\s+)?(?P<rel>" + _EN_REL + r")"
    r"(?:,?\s+(?P<relname>[A-Z][\w'-]+)(?=\s))?"
    r"|(?P<name>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?))"
)
_EN_ADVERBS = (
    r"(?:\s+(?:currently|now|still|also|really|actually|just|recently|finally|mostly|usually|mainly|primarily|"
    r"always|only|totally|absolutely|already|officially|even|definitely|truly|generally|personally|basically|"
    r"happily|proudly|honestly|mostly|regularly|often|sometimes|daily))*"
)
_EN_VALUE = r"(?P<val>(?:[^.;:!?()\[\]\"“”]|\.(?=\S))+)"
_BE = r"(?:am|is|are)"
_HAVE = r"(?:have|has)"
_EN_FACT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (attribute, re.compile(_EN_SUBJECT + _EN_ADVERBS + r"\s+" + verb))
    for attribute, verb in (
        ("lives_in", rf"(?:lives?|{_BE}\s+living|{_HAVE}\s+(?:been\s+living|lived))\s+in\s+{_EN_VALUE}"),
        ("lives_in", rf"(?:{_HAVE}\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+{_EN_VALUE}"),
        ("employer", rf"(?:works?|{_BE}\s+(?:working|employed)|{_HAVE}\s+been\s+working)\s+(?:at|for)\s+{_EN_VALUE}"),
        ("employer", rf"(?:{_HAVE}\s+)?joined\s+{_EN_VALUE}"),
        ("job_title", rf"(?:works?|{_BE}\s+working)\s+as\s+(?:an?\s+)?{_EN_VALUE}"),
        ("works_on", rf"(?:works?|{_BE}\s+working|{_HAVE}\s+been\s+working)\s+on\s+{_EN_VALUE}"),
        ("uses_tool", rf"(?:uses?|{_BE}\s+using|{_HAVE}\s+been\s+using|(?:{_HAVE}\s+)?switched\s+to)\s+{_EN_VALUE}"),
        ("prefers", rf"prefers?\s+{_EN_VALUE}"),
        ("dislikes", rf"(?:dislikes?|hates?)\s+{_EN_VALUE}"),
        ("likes", rf"(?:likes?|loves?|enjoys?|{_BE}\s+into|{_BE}\s+an?\s+(?:big\s+|huge\s+)?fan\s+of)\s+{_EN_VALUE}"),
        ("diet", rf"{_BE}\s+(?:an?\s+)?(?:strict\s+)?(?P<val>vegetarian|vegan|pescatarian|pescetarian)\b"),
        ("allergy", rf"{_BE}\s+(?:severely\s+|very\s+|highly\s+|deathly\s+)?allergic\s+to\s+{_EN_VALUE}"),
        ("allergy", rf"{_HAVE}\s+an?\s+(?P<val>[\w-]+(?:\s+[\w-]+)?)\s+allergy\b"),
        ("speaks_language", rf"speaks?\s+{_EN_VALUE}"),
    )
)  # fmt: skip
_EN_NAME_PATTERN = re.compile(r"\b(?:[Mm]y\s+name\s+is|[Cc]all\s+me)\s+(?P<val>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)")
_EN_HEDGE_BEFORE = re.compile(
    r"\b(?:if|unless|whether|wish|hope|want|wants|wanted|would|should|could|might|maybe|perhaps|think|thinks|"
    r"thought|guess|suppose|imagine|pretend|dream|not|never|which|who|whom|that)\s+(?:that\s+)?$",
    re.IGNORECASE,
)
_EN_VALUE_BOUNDARY = re.compile(
    r"\s+(?:because|since|but|so|which|who|whom|whose|where|when|while|as|for|with|from|in|at|on|to|into|"
    r"near|after|before|during|until|now|nowadays|these|lately|recently|anymore|though|although|if|than|over|"
    r"instead|every|each|almost|quite|pretty|really|very|too|a\s+lot|as\s+well|right|again|already|yet|then|"
    r"there|here|together|ever|last|this|next|today|tonight|yesterday|tomorrow|ago|lol|haha|more|most|"
    r"project)\b.*$",
    re.IGNORECASE,
)
_EN_VALUE_SPLIT = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+|\s*/\s*")
_EN_VALUE_STOPWORDS = name_keys(
    "it", "you", "him", "her", "them", "me", "us", "this", "that", "these", "those", "something", "anything",
    "everything", "nothing", "stuff", "things", "thing", "one", "so", "much", "idea", "what", "how", "here",
    "there", "too", "lot", "all", "some", "doing", "being", "having", "getting", "going", "myself", "yourself",
    "to", "both", "like", "how", "why", "when", "where", "whether", "is", "are", "was", "were", "be", "been",
    "has", "have", "had", "do", "does", "did", "can", "will", "would", "could", "should", "i", "we", "they",
    "he", "she", "your", "yours", "his", "hers", "their", "our", "my",
)  # fmt: skip
_EN_PREPOSITIONS = frozenset(
    {"for", "with", "to", "in", "on", "at", "by", "from", "about", "of", "as", "like", "into", "onto", "over", "via"}
)
_PROPER_VALUE_ATTRIBUTES = frozenset({"lives_in", "employer", "speaks_language", "name"})


def _expand_contractions(sentence: str) -> str:
    text = sentence.replace("’", "'")
    text = re.sub(r"(?<![\w'])i(?=(?:'m|'ve|'d|'ll)?(?![\w']))", "I", text)
    text = re.sub(r"\bI'm\b", "I am", text)
    text = re.sub(r"\b(\w+)'ve\b", r"\1 have", text)
    text = re.sub(r"\b(\w+)'re\b", r"\1 are", text)
    text = re.sub(r"\b(\w+)'d\b", r"\1 would", text)
    text = re.sub(r"\b(\w+)'s\s+(?=been\b)", r"\1 has ", text)
    return re.sub(r"\b(\w+)'s\s+(?=\w+ing\b)", r"\1 is ", text)


def english_sentence(
    sentence: str, speaker: Speaker, context: ExtractionContext, non_initial_caps: frozenset[str]
) -> None:
    mentions = _english_entities(sentence, context, non_initial_caps)
    keys: list[str] = []
    for mention in mentions:
        entity_type, confidence = guess_type(mention.name, context)
        if mention.hint is not None and confidence < 1:
            entity_type, confidence = mention.hint, 1
        key = context.add_entity(mention.name, entity_type, confidence)
        if key is not None and key not in keys:
            keys.append(key)
    _pattern_relations_en(sentence, mentions, context)
    cooccurrence(keys, context)
    if sentence.rstrip().endswith("?"):
        return  # a question asserts nothing
    expanded = _expand_contractions(sentence)
    for attribute, pattern in _EN_FACT_PATTERNS:
        for match in _overlapping(pattern, expanded):
            subject = _en_subject(match, speaker, context, attribute)
            if subject is None or _EN_HEDGE_BEFORE.search(expanded[: match.start("subj")]):
                continue
            if transient_reason(sentence, attribute=attribute) is not None:
                continue  # "I'm using Vim today": the templated text would hide that it was momentary
            for value in _en_values(match.group("val"), attribute):
                record_fact(subject, attribute, value, context)
    if speaker.subject is not None:
        for match in _EN_NAME_PATTERN.finditer(expanded):
            record_fact(speaker.subject, "name", match.group("val"), context)
            context.add_entity(match.group("val"), "person", 3)


def _overlapping(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """Matches that may start inside an earlier match's value: "My friend uses R and I use Python"."""
    matches: list[re.Match[str]] = []
    position = 0
    while (match := pattern.search(text, position)) is not None:
        matches.append(match)
        position = max(match.start("val"), match.start() + 1)
    return matches


def _en_subject(match: re.Match[str], speaker: Speaker, context: ExtractionContext, attribute: str) -> str | None:
    subject = match.group("subj")
    if subject == "I":
        return speaker.subject
    if subject.casefold() == "we":
        # "We moved to Busan" moves the household, the speaker included; "we use R" is a team habit.
        return speaker.subject if attribute == "lives_in" else None
    if subject.casefold() == "the user":
        return USER_SUBJECT
    if match.group("rel"):
        relname = match.group("relname")
        if relname and normalise_text_key(relname) not in _EN_STOP_CAPITALISED:
            context.people.setdefault(normalise_text_key(relname), relname)
            context.add_entity(relname, "person", 3)
            return USER_SUBJECT if context.is_user(relname) else relname
        return match.group("rel").casefold()
    words = match.group("name").split()
    # Longest known person at the end of the span ("Then Caroline" → "Caroline").
    for first in range(len(words)):
        candidate = " ".join(words[first:])
        key = normalise_text_key(candidate)
        if context.is_user(candidate):
            return USER_SUBJECT
        if key in context.people:
            return context.people[key]
    return None


def _en_values(raw: str, attribute: str) -> list[str]:
    """Values after the verb: cut at the end of the noun phrase, split on coordination for
    multi-valued attributes. The first piece that does not look like a plain noun phrase ends the
    list ("I use it to speak up ... and push for ...": nothing after "it" is a value)."""
    clause = re.split(r"\s+-+\s+|\s+['’]?cause\b|\s+cuz\b", raw.strip(), maxsplit=1)[0]
    pieces = _EN_VALUE_SPLIT.split(clause)
    if attribute not in MULTI_VALUE_ATTRIBUTES:
        pieces = pieces[:1]
    values: list[str] = []
    for piece in pieces:
        value = _EN_VALUE_BOUNDARY.sub("", piece.strip())
        value = re.sub(r"^(?:the|a|an|my|our|some|his|her|their)\s+", "", value, flags=re.IGNORECASE)
        value = value.strip(" '\"-,")
        if attribute == "works_on":
            value = re.sub(r"\s+project$", "", value, flags=re.IGNORECASE)
        words = value.split()
        if not words or len(words) > 4:
            break
        if words[0].casefold() in _EN_PREPOSITIONS:
            break
        if any(normalise_text_key(word) in _EN_VALUE_STOPWORDS for word in words):
            break
        if attribute in _PROPER_VALUE_ATTRIBUTES and not (words[0][:1].isupper() or HANGUL.match(words[0])):
            break
        values.append(value)
    return values


_EN_PATTERN_RELATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("works_on", re.compile(r"^\s+(?:works|worked|is working|are working|has been working)\s+on\s+(?:the\s+)?$")),
    (
        "uses",
        re.compile(
            r"^\s+(?:uses|used|is using|are using|runs on|is built (?:with|on)|is written in|depends on)\s+(?:the\s+)?$"
        ),
    ),
    ("works_at", re.compile(r"^\s+(?:works|worked|is working)\s+(?:at|for)\s+$")),
    ("lives_in", re.compile(r"^\s+(?:lives|lived|is living|moved)\s+(?:in|to)\s+$")),
)


def _pattern_relations_en(sentence: str, mentions: list[_Mention], context: ExtractionContext) -> None:
    for left, right in itertools.pairwise(mentions):
        between = sentence[left.end : right.start]
        for relation, pattern in _EN_PATTERN_RELATIONS:
            if pattern.match(between):
                context.add_relation(left.name, relation, right.name)
                break
