"""Typed relations an English chat sentence states through its verb (issue 50): a decision ("we chose
PostgreSQL 16 for Atlas"), a switch ("switching CI to GitHub Actions"), owning a named thing ("picked
up a used Tesla"), an age ("Bori turned 3", "Leo is 5"), the date of an event ("the offsite is on may
14"), where someone stays ("still in Berlin"), and a liking ("obsessed with dinosaurs").

The subject is read from the words right before the verb: "I" is the speaker, "we"/"the team" is the
speaker's team and so the speaker, a known name is that person or pet, "my sister" is the sister.
Values that must name a thing (decisions, switches, owned things) must look like names: capitalised
(known lowercase names were capitalised by `heuristic_chat_en.prepare_sentence`) or a known technology.
"""

from __future__ import annotations

import re

from services.common.domain.facts import USER_SUBJECT, normalise_subject, normalise_text_key
from services.semantic_extractor.gazetteers import EN_RELATION_NOUNS, PLACES, is_never_entity
from services.semantic_extractor.heuristic_chat_en import decision_edges, mention_type, speaker_node
from services.semantic_extractor.heuristic_context import ExtractionContext, Speaker, record_fact
from services.semantic_extractor.heuristic_en import en_values

_AUX = r"(?:\s+(?:am|are|is|was|were|have|has|had|just|finally|officially|all|also|now|still|already|really|" \
    r"gonna|going\s+to|will|totally|def|definitely))*\s*"  # fmt: skip
_REL = "|".join(re.escape(noun) for noun in sorted(EN_RELATION_NOUNS, key=len, reverse=True))
_SUBJECT_AT_END = re.compile(
    r"(?:^|[\s,;:(])(?P<subj>I|[Ww]e|(?:[Tt]he|[Oo]ur|[Mm]y)\s+(?:whole\s+)?team|[Mm]y\s+(?P<rel>" + _REL + r")"
    r"|(?P<name>[A-Z][\w-]*))" + _AUX + r"$"
)
_CONTRACTIONS = ((re.compile(r"\b(we|they|you)['’]re\b", re.I), r"\1 are"), (re.compile(r"\bI['’]m\b"), "I am"))
_DECISION = re.compile(
    r"\b(?:chose|choose|picked|selected|decided\s+on|decided\s+to\s+(?:go|stick)\s+with|decided\s+to\s+use|"
    r"(?P<accompany>went\s+with|going\s+with|go\s+with)|settled\s+on|opted\s+for|landed\s+on)\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
# "picked Jess up", "went with Mia": a phrasal particle or a person after the verb is no decision.
_PHRASAL_PARTICLES = frozenset({"up", "out", "off", "down", "back", "over", "away"})
_NOT_CHOSEN = frozenset({"person", "pet"})
_FOR_TARGET = re.compile(r"\bfor\b(?P<tail>.*)$", re.IGNORECASE)
_CAPITALISED_RUN = re.compile(r"\b[A-Z][\w.+#-]*(?:\s+[A-Z0-9][\w.+#-]*)*")
_SWITCH = re.compile(
    r"\b(?P<verb>switching|switched|switch|migrating|migrated|migrate|moving|moved|move|changing|changed|"
    r"porting|ported)\s+(?P<what>(?:(?!from\b|to\b)[\w.'-]+\s+){0,4}?)"
    r"(?:from\s+(?P<source>(?:(?!to\b)[\w.'-]+\s+){1,3}?))?to\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
_ACQUIRE = re.compile(
    r"\b(?:bought|got|picked\s+up|leased|owns?)\s+(?:a|an|my|our)\s+(?:(?:new|used|second-hand|secondhand|brand\s+new|"
    r"old)\s+)*(?P<val>[A-Z][\w-]*(?:\s+[A-Z0-9][\w-]*)?)"
)
_AGE = re.compile(
    r"\b(?:(?:just\s+)?(?:turned|turns|is\s+turning|will\s+turn|be\s+turning|is\s+going\s+to\s+turn)\s+"
    r"(?P<turned>\d{1,3})\b(?!\s*(?:%|:|am\b|pm\b|percent|times|k\b))"
    r"|(?:is|['’]s)\s+(?:already\s+|now\s+|only\s+|just\s+)?(?P<is>\d{1,3})(?:\s+years?\s+old)?"
    r"(?=\s*(?:$|[.,!;)]|\s+(?:and|now|so|but|already|today|lol|haha|tho|though|next|this|years)\b)))",
    re.IGNORECASE,
)
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|"
    r"apr|jun|jul|aug|sept|sep|oct|nov|dec)"
)
# A calendar date only: a weekday or "next friday" is relative to when it was said, and goes stale as a fact.
_EVENT_DATE = re.compile(
    r"\b(?:the|our|my|their|his|her)\s+(?P<event>[a-z]+(?:\s+[a-z]+)?)\s+(?:is|was|will\s+be|['’]s)\s+"
    r"(?:on\s+|in\s+|set\s+for\s+|scheduled\s+for\s+)?"
    rf"(?P<date>{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH})\b",
    re.IGNORECASE,
)
_STAYING = re.compile(
    r"^(?:I\s+am\s+|I\s+)?(?:still|now|currently|gonna\s+stay|going\s+to\s+stay|staying|based|living|stay)\s+"
    r"(?:based\s+)?in\s+(?P<val>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)?)"
)
# "we use Linear", "the team uses vscode": the team's tool, an edge from the speaker's node; no fact
# about the speaker, who may not use it themself.
_TEAM_USES = re.compile(
    r"\b(?:[Ww]e(?:\s+are)?|(?:[Tt]he|[Oo]ur|[Mm]y)\s+team(?:\s+is)?)\s+(?:(?:now|all|still|mostly|also|just)\s+)*"
    r"(?:use|using|uses|run\s+on|running\s+on|runs\s+on)\s+(?P<rest>.+)$"
)
_OBSESSED = re.compile(
    r"\b(?:is|am|['’]s|['’]m)\s+(?:so\s+|totally\s+|kinda\s+|lowkey\s+)?obsessed\s+(?:with|w/?)\s+(?P<rest>.+)$",
    re.IGNORECASE,
)
# A hedge, negation or question word earlier in the clause: "if we switch to X", "not going with Y".
_HEDGE = re.compile(
    r"\b(?:if|unless|whether|wish|hope|want|wanted|might|maybe|perhaps|thinking\s+about|considering|should|"
    r"could|would|not|never|don['’]?t|didn['’]?t|won['’]?t|can['’]?t|instead\s+of|who|which)\b",
    re.IGNORECASE,
)
_FUTURE_BEFORE = re.compile(r"\b(?:will|gonna|going\s+to|about\s+to|plan\s+to|planning\s+to)\s+$", re.IGNORECASE)
_NOT_EVENTS = frozenset({"one", "thing", "answer", "best", "same", "other", "rest", "weather"})


def chat_relations_en(sentence: str, speaker: Speaker, context: ExtractionContext) -> None:
    """Typed relations and facts from the verbs of one prepared sentence (not a question)."""
    text = sentence
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    _decisions(text, speaker, context)
    _switches(text, speaker, context)
    _acquisitions(text, speaker, context)
    _ages(text, speaker, context)
    _event_dates(text, speaker, context)
    _staying(text, speaker, context)
    _obsessions(text, speaker, context)
    _team_tools(text, speaker, context)


def _subject(before: str, speaker: Speaker, context: ExtractionContext) -> str | None:
    """Whom the verb after `before` is about, or None when the words do not say."""
    match = _SUBJECT_AT_END.search(before)
    if match is None:
        return None
    if match.group("rel"):
        return match.group("rel").casefold()
    name = match.group("name")
    if name is not None and name != "I":
        key = normalise_text_key(name)
        if context.is_user(name):
            return USER_SUBJECT
        known = context.entities.get(key)
        if key in context.people or (known is not None and known[0].type in ("person", "pet")):
            return context.people.get(key) or name
        return None
    return speaker.subject


def _hedged(text: str, start: int) -> bool:
    clause = re.split(r"[.;!?]|\bbut\b", text[:start])[-1]
    return bool(_HEDGE.search(clause))


def _is_named(value: str, context: ExtractionContext) -> bool:
    return value[:1].isupper() or mention_type(value, context) == "technology"


def _subject_text(subject: str) -> str:
    return "The user" if normalise_subject(subject) == USER_SUBJECT else subject


def _decisions(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _DECISION.finditer(text):
        if _hedged(text, match.start()):
            continue
        subject = _subject(text[: match.start()], speaker, context)
        values = en_values(match.group("rest"), "chose")
        if subject is None or not values or not _is_named(values[0], context):
            continue
        choice = values[0]
        kind = mention_type(choice, context)
        if kind in _NOT_CHOSEN or _PHRASAL_PARTICLES & {w.casefold() for w in choice.split()}:
            continue
        if match.group("accompany") and kind == "other":
            continue  # "going with Mia to the party": only a known thing is chosen by "go with"
        target = _for_target(match.group("rest")[len(choice) :], choice)
        if target is not None:
            context.add_entity(target, "project", 1)
        context.add_entity(choice, mention_type(choice, context), 1)
        for_text = f" for {target}" if target else ""
        context.add_fact(subject, "chose", choice, text=f"{_subject_text(subject)} chose {choice}{for_text}.")
        decision_edges(choice, target, speaker, context)


def _for_target(rest: str, choice: str) -> str | None:
    """The named thing a decision is for: the first name after "for" ("for payments on the Pebble app")."""
    found = _FOR_TARGET.search(rest)
    if found is None:
        return None
    run = _CAPITALISED_RUN.search(found.group("tail"))
    if run is None or normalise_text_key(run.group()) == normalise_text_key(choice):
        return None
    return run.group().split(" and ")[0].strip()


def _switches(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _SWITCH.finditer(text):
        verb = match.group("verb").casefold()
        if verb.startswith("mov") and not match.group("what") and not match.group("source"):
            continue  # "moved to Lisbon": moving house, read by the lives_in rules
        if not verb.endswith("ing") and not _FUTURE_BEFORE.search(text[: match.start()]):
            continue  # "switched to macOS": done, and the uses rules say what is used now
        if _hedged(text, match.start()):
            continue
        subject = _subject(text[: match.start()], speaker, context)
        values = en_values(match.group("rest"), "switching_to")
        if subject is None or not values or not _is_named(values[0], context):
            continue
        target = values[0]
        kind = mention_type(target, context)
        if kind in ("place", "person", "pet") or normalise_text_key(target) in PLACES or is_never_entity(target):
            continue  # "moving the call to Friday", "changed my name to Kim": no tool is switched to
        context.add_entity(target, kind, 1)
        source = _subject_node(subject, speaker, context)
        if source is not None:
            context.add_relation(source, "switching_to", target)


def _subject_node(subject: str, speaker: Speaker, context: ExtractionContext) -> str | None:
    """The graph node a relation starts from: the speaker's, or a named person or pet of the conversation."""
    if subject == speaker.subject:
        return speaker_node(speaker, context)
    return subject if normalise_text_key(subject) in context.entities else None


def _acquisitions(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _ACQUIRE.finditer(text):
        if _hedged(text, match.start()):
            continue
        subject = _subject(text[: match.start()], speaker, context)
        thing = match.group("val")
        if subject is None or mention_type(thing, context) in ("person", "pet", "place"):
            continue
        following = _NEXT_WORD.match(text[match.end() :])
        if following is not None and _modifies(following.group(1)):
            continue  # "got my Python certificate": the name modifies the thing had
        record_fact(subject, "owns", thing, context, text=f"{_subject_text(subject)} owns a {thing}.")


_NEXT_WORD = re.compile(r"\s+([a-z][\w'-]*)")
_NOT_NOUNS = frozenset({"and", "or", "but", "so", "for", "from", "at", "in", "on", "with", "to", "lol", "haha", "tho"})


def _modifies(word: str) -> bool:
    """Whether a lowercase word right after a name is the noun that name modifies."""
    return word not in _NOT_NOUNS and not is_never_entity(word)


def _ages(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _AGE.finditer(text):
        if _hedged(text, match.start()):
            continue
        subject = _subject(text[: match.start()], speaker, context)
        if subject is not None:
            context.add_fact(subject, "age", match.group("turned") or match.group("is"))


def _event_dates(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _EVENT_DATE.finditer(text):
        event = match.group("event").casefold()
        if event.split()[-1] in _NOT_EVENTS or event.split()[-1] in EN_RELATION_NOUNS:
            continue
        date = match.group("date")
        if event == "birthday":
            # "my birthday is on march 3": whose birthday, not a node called "birthday".
            if match.group().casefold().startswith("my") and speaker.subject is not None:
                context.add_fact(speaker.subject, "birthday", date)
            continue
        context.add_fact(event, "date", date, text=f"The {event} is on {date}.")


def _staying(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    match = _STAYING.match(text.strip())
    if match is None or speaker.subject is None:
        return
    place = match.group("val")
    if normalise_text_key(place) in PLACES:
        record_fact(speaker.subject, "lives_in", place, context)


def _obsessions(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    for match in _OBSESSED.finditer(text):
        if _hedged(text, match.start()):
            continue
        subject = _subject(text[: match.start()], speaker, context)
        if subject is not None:
            for value in en_values(match.group("rest"), "likes"):
                record_fact(subject, "likes", value, context)


def _team_tools(text: str, speaker: Speaker, context: ExtractionContext) -> None:
    source = speaker_node(speaker, context)
    for match in _TEAM_USES.finditer(text):
        if source is None or _hedged(text, match.start()):
            continue
        for tool in en_values(match.group("rest"), "uses_tool"):
            if mention_type(tool, context) == "technology" or normalise_text_key(tool) in context.entities:
                context.add_relation(source, "uses", tool)
