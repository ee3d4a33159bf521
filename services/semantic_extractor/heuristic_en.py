"""The English reader of the heuristic extractor: capitalised name spans, pattern relations between
them, and first-person pattern facts with a subject check ("my friend uses R" is the friend's).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from services.common.domain.facts import USER_SUBJECT, normalise_text_key, transient_reason
from services.common.domain.sentences import split_sentences
from services.semantic_extractor.gazetteers import (
    DEMONYMS,
    EN_OCCUPATIONS,
    EN_PETS,
    EN_RELATION_NOUNS,
    SCHOOL_NAME,
    SCHOOLS,
    TECH_LOWERCASE_OK,
    TECHNOLOGIES,
    VERSION_SUFFIX,
    name_keys,
)
from services.semantic_extractor.heuristic_context import (
    MULTI_VALUE_ATTRIBUTES,
    SPEECH_AFTER,
    ExtractionContext,
    Speaker,
    context_type_cue,
    cooccurrence,
    guess_type,
    is_capitalised,
    known_name,
    record_fact,
)
from services.semantic_extractor.korean_morphology import HANGUL
from services.semantic_extractor.schema import EntityType

EN_STOP_CAPITALISED = name_keys(
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
                if index > 0 and is_capitalised(token) and normalise_text_key(token) not in EN_STOP_CAPITALISED:
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
                if is_capitalised(after) and normalise_text_key(after) not in EN_STOP_CAPITALISED:
                    span.extend([probe, probe + 1])
                    probe += 2
                    continue
            break
        index = probe
        # Trim sentence-glue words from both ends ("Hey Mel" → "Mel", "Thanks Caroline" → "Caroline").
        while span and normalise_text_key(tokens[span[0]][2]) in EN_STOP_CAPITALISED:
            span.pop(0)
        while span and normalise_text_key(tokens[span[-1]][2]) in EN_STOP_CAPITALISED:
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
        speaks = bool(SPEECH_AFTER.match(sentence[tokens[span[-1]][1] :]))
        if starts_sentence and len(span) == 1 and not known and key not in non_initial_caps and not speaks:
            continue
        if len(span) == 1 and key in DEMONYMS:
            continue  # "Korean food", "I speak Japanese": a nationality or language, not a particular thing
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
    if key in EN_STOP_CAPITALISED and not _is_acronym(token):
        return False
    if key in {"lol", "omg", "btw", "fyi", "asap", "tbh", "imo", "imho", "am", "pm", "ok"}:
        return False
    return is_capitalised(token) or key in TECH_LOWERCASE_OK


_EN_REL = "|".join(re.escape(noun) for noun in sorted(EN_RELATION_NOUNS, key=len, reverse=True))
_EN_SUBJECT = (
    r"(?P<subj>\bI\b|\b[Ww]e\b|\b[Tt]he user\b"
    r"|\b(?:[Mm]y|[Oo]ur)\s+(?:(?:best|close|old|good|younger|older|little|big|new)\s+)?(?P<rel>" + _EN_REL + r")"
    r"(?:['’]s\s+(?P<relof>" + _EN_REL + r")\b)?"
    r"(?:,?\s+(?P<relname>[A-Z][\w'-]+),?(?=\s))?(?:\s+(?:in|from)\s+[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)?"
    r"|(?P<owner>[A-Z][\w-]+)['’]s\s+(?P<orel>" + _EN_REL + r")\b"
    r"|(?P<name>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?))"
)
_EN_ADVERBS = (
    r"(?:\s+(?:currently|now|still|also|really|actually|just|recently|finally|mostly|usually|mainly|primarily|"
    r"always|only|totally|absolutely|already|officially|even|definitely|truly|generally|personally|basically|"
    r"happily|proudly|honestly|mostly|regularly|often|sometimes|daily))*"
)
# A full stop inside a value only when it is not a sentence end: "Node.js", "St. Mary's".
_EN_VALUE = r"(?P<val>(?:[^.;:!?()\[\]\"“”]|\.(?=\S)|(?<=\b(?:St|Mt))\.)+)"
_BE = r"(?:am|is|are)(?:\s+(?:currently|still|now|also|really|actually|just|mostly|mainly|already|finally))*"
_HAVE = r"(?:have|has)"
_OCCUPATION = "|".join(re.escape(word) for word in sorted(EN_OCCUPATIONS, key=len, reverse=True))
_ROLE = rf"(?P<val>(?:[A-Za-z][\w-]*\s+){{0,2}}?(?:{_OCCUPATION})s?)\b"
_ORG_NAME = r"[A-Z][\w.&'’-]*(?:\s+(?:of\s+)?[A-Z][\w.&'’-]*)*"
_PET = "|".join(EN_PETS)
_ROLE_WORDS = rf"(?:[A-Za-z][\w-]*\s+){{0,2}}?(?:{_OCCUPATION})"
_DIETS = r"vegetarian|vegan|pescatarian|pescetarian|gluten-free|gluten free|dairy-free|keto|halal|kosher"
_COUNT = r"(?:an?\s+|one\s+|two\s+|three\s+|four\s+|\d+\s+|a\s+few\s+|some\s+)?"
_PET_ADJECTIVE = r"(?:(?:little|small|big|old|young|rescue|pet)\s+)?"
_CODE_VERBS = r"(?:code|codes|coding|program|programs|programming|write|writes|writing|develop|develops|developing)"
_BUILD_VERBS = r"(?:leading|leads|building|builds|developing|develops|maintaining|maintains)"
_STATUSES = r"married|single|divorced|engaged|widowed"
# "a dog allergy", "a cat sitter": the animal word modifies another noun; no pet is had.
_NOT_A_PET_THING = r"(?!\s+(?:allerg\w*|food|sitter|walker|bed|toy|toys|hair|person|people|lover|video|videos))"
_NOT_A_SPORT = r"(?!a\b|an\b|the\b|with\b|around\b|it\b|them\b)"
_LIVE = rf"(?:lives?|{_BE}\s+living|{_HAVE}\s+(?:been\s+living|lived))"
_START_JOB = rf"(?:started|{_HAVE}\s+started|{_BE}\s+starting)\s+(?:a\s+)?(?:new\s+)?(?:job|position|role)"
_EN_FACT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (attribute, re.compile(_EN_SUBJECT + _EN_ADVERBS + r"\s+" + verb))
    for attribute, verb in (
        ("lives_in", rf"{_LIVE}\s+(?:alone\s+|together\s+)?in\s+{_EN_VALUE}"),
        ("lives_in", rf"(?:{_HAVE}\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+{_EN_VALUE}"),
        ("employer", rf"(?:works?|{_BE}\s+(?:working|employed)|{_HAVE}\s+been\s+working)\s+(?:at|for)\s+{_EN_VALUE}"),
        ("employer", rf"(?:{_HAVE}\s+)?joined\s+{_EN_VALUE}"),
        ("job_title", rf"(?:works?|{_BE}\s+working)\s+as\s+(?:an?\s+)?{_EN_VALUE}"),
        ("works_on", rf"(?:works?|{_BE}\s+working|{_HAVE}\s+been\s+working)\s+on\s+{_EN_VALUE}"),
        ("uses_tool", rf"(?:uses?|{_BE}\s+using|{_HAVE}\s+been\s+using|(?:{_HAVE}\s+)?switched\s+to)\s+{_EN_VALUE}"),
        ("prefers", rf"prefers?\s+{_EN_VALUE}"),
        ("dislikes", rf"(?:dislikes?|hates?)\s+{_EN_VALUE}"),
        ("likes", rf"(?:likes?|loves?|enjoys?|{_BE}\s+into|{_BE}\s+an?\s+(?:big\s+|huge\s+)?fan\s+of)\s+{_EN_VALUE}"),
        ("diet", rf"{_BE}\s+(?:an?\s+)?(?:strict\s+)?(?P<val>{_DIETS})\b"),
        ("allergy", rf"{_BE}\s+(?:severely\s+|very\s+|highly\s+|deathly\s+)?allergic\s+to\s+{_EN_VALUE}"),
        ("allergy", rf"{_HAVE}\s+an?\s+(?P<val>[\w-]+(?:\s+[\w-]+)?)\s+allergy\b"),
        ("speaks_language", rf"speaks?\s+{_EN_VALUE}"),
        # Roles: "I'm a data scientist at Spotify", "my brother is a nurse", "I'm the tech lead on Helix".
        ("job_title", rf"{_BE}\s+(?:an?|the)\s+{_ROLE}"),
        ("job_title", rf"(?:works?|{_BE}\s+working)\s+(?:at|for|in)\s+[^,.;]{{1,40}}?\s+as\s+(?:an?\s+)?{_EN_VALUE}"),
        ("job_title", rf"(?:{_HAVE}\s+)?joined\s+[^,.;]{{1,40}}?\s+as\s+(?:an?\s+)?{_EN_VALUE}"),
        ("employer", rf"{_BE}\s+(?:an?|the)\s+{_ROLE_WORDS}\s+(?:at|for)\s+{_EN_VALUE}"),
        ("employer", rf"(?:works?|{_BE}\s+working)\s+as\s+(?:an?\s+)?[\w -]{{1,30}}?\s+(?:at|for)\s+{_EN_VALUE}"),
        ("employer", rf"{_START_JOB}\s+(?:at|with)\s+{_EN_VALUE}"),
        ("employer", rf"(?:{_HAVE}\s+)?(?:just\s+)?started\s+(?:working\s+)?at\s+{_EN_VALUE}"),
        ("employer", rf"{_BE}\s+(?:now\s+)?at\s+(?=an?\s+[\w-]+\s+(?:called|named)\s){_EN_VALUE}"),
        ("works_on", rf"{_BE}\s+(?:an?|the)\s+{_ROLE_WORDS}\s+(?:on|of|for)\s+{_EN_VALUE}"),
        ("works_on", rf"(?:{_BE}\s+)?{_BUILD_VERBS}\s+{_EN_VALUE}"),
        ("age", rf"{_BE}\s+(?P<val>\d{{1,3}})(?:\s+years?\s+old)?(?=\s*(?:$|[.,!;]|\s+and\b|\s+now\b))"),
        ("relationship_status", rf"{_BE}\s+(?:happily\s+|recently\s+|newly\s+)?(?P<val>{_STATUSES})\b"),
        ("birthplace", rf"(?:was|were)\s+born\s+(?:and\s+raised\s+)?in\s+{_EN_VALUE}"),
        ("birthplace", rf"{_BE}\s+originally\s+from\s+{_EN_VALUE}"),
        ("lives_in", rf"(?:works?|{_BE}\s+working)\s+remotely\s+from\s+{_EN_VALUE}"),
        ("school", rf"(?:goes|go|{_BE}\s+going|attends?|{_BE}\s+attending)\s+(?:to\s+)?{_EN_VALUE}"),
        ("school", rf"(?:studies|study|{_BE}\s+studying|{_BE}\s+enrolled)\s+at\s+{_EN_VALUE}"),
        ("school", rf"(?:just\s+)?started\s+at\s+{_EN_VALUE}"),
        ("has_pet", rf"{_HAVE}\s+{_COUNT}{_PET_ADJECTIVE}(?P<val>{_PET})\b{_NOT_A_PET_THING}"),
        ("uses_language", rf"{_CODE_VERBS}\s+(?:in\s+)?{_EN_VALUE}"),
        ("dislikes", rf"{_BE}\s+not\s+(?:really\s+)?(?:a|much\s+of\s+a)\s+(?:big\s+)?fan\s+of\s+{_EN_VALUE}"),
        ("hobby", rf"(?:plays|play|{_BE}\s+playing)\s+{_NOT_A_SPORT}(?P<val>[a-z]+(?:\s+[a-z]+)?)\b"),
    )
)  # fmt: skip
# Patterns whose value must be a particular kind of thing for them to mean what they say: "goes to X" is a
# school only when X is one, "is building X" is a project only when X is a name that is not a tool, "writes
# X" is a language only when X is a known technology, and a student's "at X" is a school, not an employer.
_EN_VALUE_KINDS: dict[int, str] = {}
for _index, (_attribute, _pattern) in enumerate(_EN_FACT_PATTERNS):
    if _attribute == "school":
        _EN_VALUE_KINDS[_index] = "school"
    elif _attribute == "uses_language":
        _EN_VALUE_KINDS[_index] = "technology"
    elif _attribute == "works_on" and "building" in _pattern.pattern:
        _EN_VALUE_KINDS[_index] = "project_name"
    elif _attribute == "employer" and _OCCUPATION in _pattern.pattern:
        _EN_VALUE_KINDS[_index] = "role_at"
    elif _attribute == "employer" and "started\\s+(?:working" in _pattern.pattern:
        _EN_VALUE_KINDS[_index] = "not_school"
# "My roommate is from Busan and works at Samsung": a verb after "and" shares the clause's subject.
_EN_SHARED_VERB_SUBJECT = re.compile(
    r"\b(?P<head>I|[Mm]y\s+(?:"
    + _EN_REL
    + r"))\b(?P<mid>[^.;!?]*?)\s+(?:and|who)\s+(?!I\b)(?=(?:(?:also|now|still)\s+)?"
    r"(?:works?|lives?|uses?|speaks?|likes?|loves?|hates?|prefers?|studies|study|goes|go)\b)"
)
# "I'm vegetarian and allergic to peanuts": the second predicate shares the first one's subject.
_EN_SHARED_SUBJECT = re.compile(
    r"\b(?P<head>I am|I have)\b(?P<mid>[^.;!?]*?)\s+and\s+(?!I\b)"
    r"(?=(?:(?:also|severely|very|recently|happily|newly)\s+)?"
    r"(?:allergic|vegetarian|vegan|gluten|dairy|married|single|engaged|divorced|an?\s|originally\s|from\s|\d))"
)
_EN_NAME_PATTERN = re.compile(
    r"\b(?:[Mm]y\s+name\s+is|[Mm]y\s+name's|[Cc]all\s+me)\s+(?P<val>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)"
)
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
    r"project|fluently|natively|well|a\s+bit|a\s+little|sometimes|occasionally|mostly|mainly|twice|once|"
    r"daily|weekly|alone|tbh|tho|ngl|imo|btw|rn|fr|lmao|pls)\b.*$",
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
# A piece after a comma that starts like a new clause, not a listed value ("…, pls no sushi boats").
_NOT_VALUE_STARTS = frozenset({"pls", "plz", "please", "no", "not", "but", "so", "lol", "haha", "which", "that"})
_PROPER_VALUE_ATTRIBUTES = frozenset({"lives_in", "employer", "speaks_language", "name", "birthplace", "school"})


def _expand_contractions(sentence: str) -> str:
    text = sentence.replace("’", "'")
    text = re.sub(r"(?<![\w'])i(?=(?:'m|'ve|'d|'ll)?(?![\w']))", "I", text)
    text = re.sub(r"\bI'm\b", "I am", text)
    text = re.sub(r"\b(\w+)'ve\b", r"\1 have", text)
    text = re.sub(r"\b(\w+)'re\b", r"\1 are", text)
    text = re.sub(r"\b(\w+)'d\b", r"\1 would", text)
    text = re.sub(r"\b(\w+)'s\s+(?=been\b)", r"\1 has ", text)
    text = re.sub(r"\b([Nn]ame)'s\b", r"\1 is", text)
    text = re.sub(r"\b(\w+)'s\s+(?=\w+ing\b)", r"\1 is ", text)
    previous = None
    while previous != text:  # "I am vegetarian and allergic to …" → "… and I am allergic to …"
        previous = text
        text = _EN_SHARED_SUBJECT.sub(lambda m: f"{m['head']}{m['mid']} and {m['head']} ", text, count=1)
        text = _EN_SHARED_VERB_SUBJECT.sub(lambda m: f"{m['head']}{m['mid']} and {m['head']} ", text, count=1)
    return text


def english_sentence(
    sentence: str, speaker: Speaker, context: ExtractionContext, non_initial_caps: frozenset[str]
) -> None:
    mentions = _english_entities(sentence, context, non_initial_caps)
    keys: list[str] = []
    for mention in mentions:
        entity_type, confidence = guess_type(mention.name, context)
        if confidence < 1:
            cue = mention.hint or context_type_cue(sentence, mention.start, mention.end, mention.name)
            if cue is not None:
                entity_type, confidence = cue, 1
        key = context.add_entity(mention.name, entity_type, confidence)
        if key is not None and key not in keys:
            keys.append(key)
    _pattern_relations_en(sentence, mentions, context)
    cooccurrence(keys, context)
    if sentence.rstrip().endswith("?"):
        return  # a question asserts nothing
    _english_facts(sentence, speaker, context)


def _english_facts(sentence: str, speaker: Speaker, context: ExtractionContext) -> None:
    expanded = _expand_contractions(sentence)
    for index, (attribute, pattern) in enumerate(_EN_FACT_PATTERNS):
        for match in _overlapping(pattern, expanded):
            if _EN_HEDGE_BEFORE.search(expanded[: match.start("subj")]):
                continue
            if transient_reason(sentence, attribute=attribute) is not None:
                continue  # "I'm using Vim today": the templated text would hide that it was momentary
            kind = _EN_VALUE_KINDS.get(index)
            fact_attribute = "school" if kind == "role_at" and re.search(r"\bstudents?\b", match[0]) else attribute
            subject = _en_subject(match, speaker, context, fact_attribute)
            if subject is None:
                continue
            for value in en_values(match.group("val"), fact_attribute):
                if _value_fits(kind, value):
                    record_fact(subject, fact_attribute, value, context)
    if speaker.subject is not None:
        for match in _EN_NAME_PATTERN.finditer(expanded):
            record_fact(speaker.subject, "name", match.group("val"), context)
            context.add_entity(match.group("val"), "person", 3)


def _value_fits(kind: str | None, value: str) -> bool:
    if kind == "school":
        return bool(SCHOOL_NAME.search(value)) or normalise_text_key(value) in SCHOOLS
    if kind == "technology":
        return _is_technology(value)
    if kind == "not_school":
        return not (SCHOOL_NAME.search(value) or normalise_text_key(value) in SCHOOLS)
    if kind == "project_name":
        return value[:1].isupper() and not _is_technology(value)
    return True


def _is_technology(value: str) -> bool:
    return normalise_text_key(VERSION_SUFFIX.sub("", value)) in TECHNOLOGIES


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
    if match.group("owner"):
        # "Jun's sister works at LG": the sister, and Jun is a person.
        owner = match.group("owner")
        context.people.setdefault(normalise_text_key(owner), owner)
        context.add_entity(owner, "person", 3)
        return f"{owner}'s {match.group('orel').casefold()}"
    if match.group("rel"):
        relname = match.group("relname")
        if relname and normalise_text_key(relname) not in EN_STOP_CAPITALISED:
            context.people.setdefault(normalise_text_key(relname), relname)
            context.add_entity(relname, "person", 3)
            return USER_SUBJECT if context.is_user(relname) else relname
        if match.group("relof"):
            return f"{match.group('rel').casefold()}'s {match.group('relof').casefold()}"  # "my sister's boyfriend"
        return match.group("rel").casefold()
    words = match.group("name").split()
    pet = context.entities.get(normalise_text_key(words[-1]))
    if pet is not None and pet[0].type == "pet":
        return pet[0].name  # "Bori is 3": a pet the conversation introduced
    # Longest known person at the end of the span ("Then Caroline" → "Caroline").
    for first in range(len(words)):
        candidate = " ".join(words[first:])
        key = normalise_text_key(candidate)
        if context.is_user(candidate):
            return USER_SUBJECT
        if key in context.people:
            return context.people[key]
    if attribute in _PERSON_ATTRIBUTES and len(words) == 1 and _unknown_name(words[0], context):
        # "Sora lives in Daegu": only a person lives, works or has a job; an unknown name doing so is one.
        context.people.setdefault(normalise_text_key(words[0]), words[0])
        context.add_entity(words[0], "person", 3)
        return words[0]
    return None


_PERSON_ATTRIBUTES = frozenset(
    {"lives_in", "employer", "job_title", "birthplace", "school", "diet", "allergy", "age", "speaks_language"}
)


def _unknown_name(word: str, context: ExtractionContext) -> bool:
    key = normalise_text_key(word)
    if key in EN_STOP_CAPITALISED or not word[1:].islower():
        return False
    return guess_type(word, context)[1] == 0


def en_values(raw: str, attribute: str) -> list[str]:
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
        called = re.match(r"^(?:an?\s+|the\s+)?[\w-]+(?:\s+[\w-]+)?\s+(?:called|named)\s+(?P<name>.+)$", value)
        if called is not None:
            value = called.group("name")  # "a startup called Lumen" → "Lumen"
        value = re.sub(r"^(?:the|a|an|my|our|some|his|her|their)\s+", "", value, flags=re.IGNORECASE)
        value = re.sub(
            r"^(?:bit\s+of|little(?:\s+bit\s+of)?|basic|fluent|conversational|sometimes|also|occasionally|especially|"
            r"particularly|mostly|mainly)\s+",
            "",
            value,
            flags=re.IGNORECASE,
        )
        value = value.strip(" '\"-,")
        if attribute == "works_on":
            value = re.sub(r"\s+project$", "", value, flags=re.IGNORECASE)
        words = value.split()
        if not words or len(words) > 4:
            break
        if words[0].casefold() in _EN_PREPOSITIONS or words[0].casefold() in _NOT_VALUE_STARTS:
            break
        if any(normalise_text_key(word) in _EN_VALUE_STOPWORDS for word in words):
            break
        proper = words[0][:1].isupper() or HANGUL.match(words[0])
        if attribute in _PROPER_VALUE_ATTRIBUTES and not proper and not _bare_employer(piece, value, attribute):
            break
        values.append(value)
    return values


# Nouns English puts bare after "work at/for" without being a name ("at home", "for startups", "at night").
_BARE_COMMON_NOUNS = name_keys(
    "home", "work", "school", "college", "university", "uni", "church", "hospital", "night", "nights", "weekends",
    "remote", "office", "startup", "startups", "company", "companies", "agency", "agencies", "retail", "tech",
    "sales", "marketing", "finance", "restaurant", "restaurants", "bank", "banks", "place", "places", "lab",
    "free", "fun", "money", "hire", "myself", "yourself", "himself", "herself", "ourselves", "clients", "people",
)  # fmt: skip


def _bare_employer(piece: str, value: str, attribute: str) -> bool:
    """A lowercase employer typed in chat ("working at dell now"): one bare word after "at/for", no
    article or possessive before it (those make it a common noun: "at a bank"), not a noun English uses
    bare ("at home")."""
    if attribute != "employer" or re.match(r"\s*(?:the|an?|my|our|his|her|their|some|this|that)\b", piece, re.I):
        return False
    return bool(re.fullmatch(r"[a-z]{3,}", value)) and normalise_text_key(value) not in _BARE_COMMON_NOUNS


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
