"""English chat as people type it, for the heuristic extractor (issue 50): lowercase names, dropped
subjects, pronouns, and pets and people a possessive introduces. The typed relations the prepared
sentence states are read by `heuristic_chat_relations`.

Everything here is grammar over closed word classes, never a list of the things people talk about:
- Names the conversation already knows (speakers, people and pets introduced earlier, unambiguous
  gazetteer names) are capitalised before the sentence is read, so "works at naver" reads like "works at
  Naver" and the English reader's name rules apply.
- A possessive and a kind noun introduce a name: "my dog bori" (a pet), "my sister yuna" (a person).
- A sentence that starts with a verb has dropped its subject, the speaker ("moved to lisbon" → "I moved
  to lisbon"); a sentence that starts with he/she is about the last person or pet introduced.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from services.common.domain.facts import USER_SUBJECT, normalise_subject, normalise_text_key
from services.semantic_extractor.gazetteers import (
    AMBIGUOUS_NAMES,
    EN_PETS,
    EN_RELATION_NOUNS,
    ORGANISATIONS,
    PLACES,
    TECH_LOWERCASE_OK,
    TECHNOLOGIES,
    is_never_entity,
)
from services.semantic_extractor.heuristic_context import ExtractionContext, Speaker, guess_type
from services.semantic_extractor.heuristic_en import EN_STOP_CAPITALISED
from services.semantic_extractor.schema import EntityType

# ---- Closed word classes -------------------------------------------------------------------------------
_FUNCTION_WORDS = frozenset(
    {
        "i", "me", "my", "we", "us", "our", "you", "your", "he", "him", "his", "she", "her", "it", "its", "they",
        "them", "their", "this", "that", "these", "those", "a", "an", "the", "and", "or", "but", "so", "if",
        "is", "am", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do", "does", "did",
        "will", "would", "can", "could", "should", "may", "might", "must", "just", "also", "now", "still",
        "really", "finally", "already", "always", "never", "not", "too", "very", "to", "of", "in", "on", "at",
        "for", "with", "from", "by", "about", "as", "who", "which", "what", "when", "where", "why", "how",
        "got", "gets", "get", "lol", "haha", "tho", "tbh", "btw", "ngl", "fyi", "pls", "omg", "rn", "imo",
    }
)  # fmt: skip
# Leading words that carry no subject: "ok so moved to lisbon", "fyi started at stripe".
_LEADING_FILLERS = re.compile(
    r"^(?:(?:ok|okay|so|also|and|btw|fyi|update|heads\s+up|honestly|lol|haha|well|yeah|yep|omg|guess\s+what|"
    r"anyway|oh|ah|hey|ps|tbh|ngl)\b[\s,:!.]*)+",
    re.IGNORECASE,
)
# Verb forms that start a sentence whose subject was dropped; the -ing forms take "I am". Past forms, and
# the two feelings chat states bare ("love linear tbh"); bare "use"/"work on" would be imperatives.
_DROPPED_SUBJECT_VERBS = frozenset(
    {
        "moved", "started", "joined", "switched", "migrated", "picked", "chose", "decided", "adopted", "bought",
        "got", "love", "loved", "hate", "hated", "liked", "used", "went", "settled", "opted", "turned", "leased",
    }
)  # fmt: skip
_DROPPED_SUBJECT_PROGRESSIVE = frozenset(
    {"moving", "working", "living", "switching", "migrating", "using", "going", "starting", "staying", "changing"}
)
# He/she opening a sentence or a clause: "he's 5", "… and she's obsessed with dinosaurs".
_PRONOUN = re.compile(r"(?P<before>^|\b(?:and|but|so)\s+|,\s*)(?:he|she)\b(?=\s|['’]s\b)", re.IGNORECASE)
_PET_NOUN = re.compile(rf"^(?:{'|'.join(EN_PETS)})$", re.IGNORECASE)
_REL_NOUNS = frozenset(EN_RELATION_NOUNS)
_WORD = re.compile(r"[A-Za-z][\w'’-]*")
_INTRODUCED = re.compile(
    r"\b(?:my|our|his|her|their)\s+(?:(?:new|little|old|baby|younger|older|big|best|rescue)\s+)?"
    r"(?P<kind>[^\W\d_][\w-]*)\s*,?\s+(?P<name>[A-Za-z][a-z-]+)\b(?P<after>[\s,]*[\w'’]*)",
    re.IGNORECASE,
)
# An apposition naming the kind after the name: "bori, my dog, …", "Coco (a rescue cat)"; after a bare
# comma only a possessive makes one ("thanks, a dog would be fun" names nothing).
_PET_APPOSITION = re.compile(
    rf"\b(?P<name>[A-Za-z][a-z-]+)\s*(?:,\s*(?:my|our)|\(\s*(?:my|our|a|an|the))\s+(?:(?:little|old|new|rescue)\s+)?"
    rf"(?P<kind>{'|'.join(EN_PETS)})\b",
    re.IGNORECASE,
)
_PET_NAMED = re.compile(r"\b(?:her|his|its|their)\s+name\s+is\s+(?P<name>[A-Za-z][a-z-]+)", re.IGNORECASE)
_PET_ACQUIRED = re.compile(
    rf"\b(?:adopted|got|have|has|rescued|brought\s+home)\s+(?:an?|two|three|our|my)\s+(?:new\s+|little\s+)?"
    rf"(?P<kind>{'|'.join(EN_PETS)})\b",
    re.IGNORECASE,
)


# A kind noun naming its animal ("my dog Bori", "고양이 모모") outranks every other type guess, a person
# guessed from the name being a subject ("모모가 열두 살이야") included.
PET_CONFIDENCE = 4


@dataclass(slots=True)
class ChatState:
    """What one conversation has introduced so far: the last person or pet (for he/she), an animal not
    yet named (for "her name is …"), and the sentence before."""

    referent: str | None = None
    pet_kind: str | None = None  # the animal a speaker just got ("we adopted a cat"), until it is named
    previous: str | None = None  # the sentence before, as prepared


def _is_name_word(word: str) -> bool:
    key = word.casefold()
    return key not in _FUNCTION_WORDS and not is_never_entity(word) and not _PET_NOUN.match(word)


_NOBODY = Speaker(None)  # a pet whose owner the words do not say
# Verbs a lowercase word after "my sister" may be instead of a name ("my mom said", "my dog ate").
_COMMON_IRREGULAR_VERBS = frozenset(
    {
        "said", "told", "got", "went", "made", "took", "came", "ran", "saw", "left", "thought", "felt", "knew",
        "kept", "ate", "bit", "fell", "found", "gave", "heard", "lost", "met", "paid", "put", "sent", "sat",
        "slept", "spent", "stood", "won", "wrote", "say", "tell", "go", "make", "take", "come", "run", "see",
        "know", "keep", "eat", "give", "hear", "meet", "pay", "send", "sleep", "spend", "win", "write", "let",
        "can't", "cant", "won't", "wont", "doesn't", "doesnt", "didn't", "didnt", "isn't", "isnt", "wasn't",
    }
)  # fmt: skip
_NAME_FOLLOWERS = frozenset(
    {"is", "was", "has", "had", "just", "will", "and", "who", "turned", "turns", "can", "could", "would", "still"}
)


def _introduced_name_ok(name: str, after: str) -> bool:
    """Whether the word after "my sister"/"my dog" is a name. A capitalised word is; a lowercase one must
    not look like a verb itself and must be followed by one (or by nothing, or by a comma)."""
    if not _is_name_word(name) or name.casefold() in _COMMON_IRREGULAR_VERBS:
        return False
    if name[:1].isupper():
        return True
    if re.search(r"(?:s|ed|ing|ly)$", name):
        return False
    following = after.strip(" ,").casefold()
    return (
        not following
        or after.lstrip().startswith(",")
        or following in _NAME_FOLLOWERS
        or following.startswith(("'s", "’s"))
        or bool(re.search(r"(?:s|ed)$", following))
    )


def _known_lowercase_name(key: str, context: ExtractionContext) -> bool:
    """A name this conversation knows, or an unambiguous gazetteer place or organisation, or a technology
    whose lowercase spelling is no common word ("python", not "pandas"... nor "slack")."""
    if key in AMBIGUOUS_NAMES or key in _FUNCTION_WORDS:
        return False
    if key in context.people:
        return True
    entity = context.entities.get(key)
    if entity is not None and entity[0].type in ("pet", "person"):
        return True
    return len(key) > 1 and (key in PLACES or key in ORGANISATIONS or key in TECH_LOWERCASE_OK)


# ---- Preparing a sentence ------------------------------------------------------------------------------


def introduce_names(sentence: str, speaker: Speaker, context: ExtractionContext, state: ChatState) -> None:
    """Record people and pets a possessive introduces ("my dog bori", "my sister yuna", "we adopted a cat
    … her name is mochi") and remember the last one for he/she."""
    for match in _INTRODUCED.finditer(sentence):
        kind, name = match.group("kind").casefold(), match.group("name")
        if not _introduced_name_ok(name, match.group("after")) or normalise_text_key(name) in context.user_keys:
            continue
        if _PET_NOUN.match(kind):
            _add_pet(name, kind, speaker, context, state)
        elif kind in _REL_NOUNS:
            key = normalise_text_key(name)
            if key in TECHNOLOGIES or key in ORGANISATIONS or key in PLACES:
                continue
            display = name[:1].upper() + name[1:]
            context.people.setdefault(key, display)
            context.add_entity(display, "person", 3)
            state.referent = context.people[key]
    for match in _PET_APPOSITION.finditer(sentence):
        if _is_name_word(match.group("name")) and not re.search(r"(?:ed|ing|ly)$", match.group("name")):
            owned = match.group(0).split(maxsplit=1)[-1].lstrip(",( ").casefold().startswith(("my", "our"))
            _add_pet(match.group("name"), match.group("kind"), speaker if owned else _NOBODY, context, state)
    acquired = _PET_ACQUIRED.search(sentence)
    if acquired is not None:
        state.pet_kind = acquired.group("kind")
    named = _PET_NAMED.search(sentence)
    if named is not None and _is_name_word(named.group("name")) and state.pet_kind is not None:
        _add_pet(named.group("name"), state.pet_kind, speaker, context, state)  # "adopted a cat … her name is Mochi"


def _add_pet(name: str, kind: str | None, speaker: Speaker, context: ExtractionContext, state: ChatState) -> None:
    display = name[:1].upper() + name[1:]
    context.people.pop(normalise_text_key(display), None)
    context.add_entity(display, "pet", PET_CONFIDENCE)
    state.referent = display
    state.pet_kind = None
    if speaker.subject is None:
        return
    kind_word = (kind or "pet").casefold()
    if kind_word.endswith("s") and not kind_word.endswith("ss"):
        kind_word = kind_word[:-1]
    subject_text = "The user" if normalise_subject(speaker.subject) == USER_SUBJECT else speaker.subject
    context.add_fact(speaker.subject, "has_pet", kind_word, text=f"{subject_text} has a {kind_word} named {display}.")
    source = speaker_node(speaker, context)
    if source is not None:
        context.add_relation(source, "owns", display)


def speaker_node(speaker: Speaker, context: ExtractionContext) -> str | None:
    """The graph node of the speaker: their name, or the user's display name; None without one."""
    if speaker.subject is None:
        return None
    if normalise_subject(speaker.subject) == USER_SUBJECT:
        if context.user_display_name is None:
            return None
        context.add_entity(context.user_display_name, "person", 3)
        return context.user_display_name
    key = normalise_text_key(speaker.subject)
    return speaker.subject if key in context.entities else None


def decision_edges(choice: str, target: str | None, speaker: Speaker, context: ExtractionContext) -> None:
    """Who decided (the speaker's node) and what the decision is for (a project) both point at the choice:
    "which database did we pick for Atlas?" starts from Atlas, "what did Priya choose?" from Priya."""
    for source in (target, speaker_node(speaker, context)):
        if source is not None:
            context.add_relation(source, "chose", choice)


def prepare_sentence(sentence: str, speaker: Speaker, context: ExtractionContext, state: ChatState) -> str:
    """The sentence as the English reader expects it: known names capitalised, a dropped subject put
    back, a leading he/she replaced by the person or pet it refers to."""
    text = _capitalise_known_names(sentence, context)
    head = _LEADING_FILLERS.match(text)
    start = head.end() if head else 0
    body = text[start:]
    first = _WORD.match(body)
    if first is not None and speaker.subject is not None:
        word = first.group().casefold()
        if word in _DROPPED_SUBJECT_PROGRESSIVE:
            return text[:start] + "I am " + body
        if word in _DROPPED_SUBJECT_VERBS and not _followed_by_object_pronoun_subject(body):
            return text[:start] + "I " + body
    if _PRONOUN.search(body):
        _person_from_pronoun(context, state)
    state.previous = text
    if state.referent is not None:
        referent = state.referent
        body = _PRONOUN.sub(lambda m: m.group("before") + referent, body)
    return text[:start] + body


def _person_from_pronoun(context: ExtractionContext, state: ChatState) -> None:
    """ "Priya pushed for pg. she said …": he/she after the one person or untyped name of the previous
    sentence refers to it, and only a person is he or she (pets are introduced by their kind noun first)."""
    previous = state.previous
    if previous is None or (state.referent is not None and _mentions(previous, state.referent)):
        return
    untyped = [
        entity.name
        for entity, confidence in context.entities.values()
        if (entity.type == "person" or (entity.type == "other" and confidence <= 1))
        and _mentions(previous, entity.name)
        and not context.is_user(entity.name)
    ]
    if not untyped:
        # "Priya pushed for pg": a capitalised first word is no name by itself; he/she after it makes it one.
        first = _WORD.match(previous.lstrip(" \"'“‘("))
        word = first.group() if first is not None else ""
        if _could_be_first_name(word, context):
            untyped = [word]
    if len(untyped) == 1 and len(untyped[0].split()) <= 2:
        name = untyped[0]
        context.add_entity(name, "person", 2)
        context.people.setdefault(normalise_text_key(name), name)
        state.referent = name


def _could_be_first_name(word: str, context: ExtractionContext) -> bool:
    key = normalise_text_key(word)
    shaped = word[:1].isupper() and word[1:].islower() and _is_name_word(word)
    return shaped and key not in EN_STOP_CAPITALISED and key not in context.entities


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def _followed_by_object_pronoun_subject(body: str) -> bool:
    # "like i said", "love you": not a statement about a thing the speaker likes.
    return bool(re.match(r"^\w+\s+(?:i|you|u)\b", body, re.IGNORECASE))


def _capitalise_known_names(sentence: str, context: ExtractionContext) -> str:
    words = list(_WORD.finditer(sentence))
    upper = {i for i, word in enumerate(words) if _known_lowercase_name(normalise_text_key(word.group()), context)}
    for i, (left, right) in enumerate(itertools.pairwise(words)):
        # "github actions", "new york": a two-word gazetteer name is one name, both words capitalised.
        key = normalise_text_key(f"{left.group()} {right.group()}")
        joined = not sentence[left.end() : right.start()].strip()
        if joined and key not in AMBIGUOUS_NAMES and (key in TECHNOLOGIES or key in PLACES or key in ORGANISATIONS):
            upper |= {i, i + 1}
    text = list(sentence)
    for i in upper:
        start = words[i].start()
        text[start] = text[start].upper()
    return "".join(text)


def mention_type(name: str, context: ExtractionContext) -> EntityType:
    """The type of a value a relation points at: what the conversation or a gazetteer says, else other."""
    key = normalise_text_key(name)
    known = context.entities.get(key)
    if known is not None:
        return known[0].type
    return guess_type(name, context)[0]
