"""The words of a value question that a memory answering it need not repeat, pure.

The detail check (detail.py) asks whether a memory names what a question asks about. Two kinds of the
question's words are not that, and reading them as details cut memories that answer:

- **The kind of the answer.** In "which database did we pick", "what framework are we on" and "무슨 DB
  써?", the noun after the interrogative determiner names the kind of value wanted; the answer names an
  instance ("Postgres 16", "Swift and Kotlin"), and a chat that states the instance rarely says its kind.
- **The action asked about.** "pick", "chose", "decided", "are we using", "went with" are one event in
  many words: the verb of a question is the part people paraphrase most. Korean already counts nouns
  only (detail.py); English has no tagger here, so the main verb is read from the question's grammar:
  after the auxiliary and its subject ("did we *pick*", "are we *using*", "can't Bori *eat*"), or right
  after "who" ("who *fixed* the bug").

Words that say when the question holds ("now", "again", "still", "anymore") are not details either.
What is left (the nouns around the event: "the SSO bug", "Bori's vet", "the billing reports") is what
the check asks a memory to name. Every list below is a closed word class of English grammar
(auxiliaries, pronouns, determiners, prepositions, aspect adverbs), not vocabulary of any data set.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_DO_AND_MODALS = _words(
    "do does did don't doesn't didn't can can't cannot could couldn't will won't would wouldn't shall "
    "should shouldn't may might must"
)
_BE = _words("is are was were am isn't aren't wasn't weren't")
_HAVE = _words("has have had hasn't haven't hadn't")
_AUXILIARIES = _DO_AND_MODALS | _BE | _HAVE
_SUBJECT_PRONOUNS = _words("i we you he she they it")
_DETERMINERS = _words("the a an my our your his her their its this that these those some any")
_PREPOSITIONS = _words("of for to in on at with from about by into after before between")
# Aspect and time adverbs: when or how often the asked thing holds, never the thing itself.
ASPECT_ADVERBS = _words(
    "now again still already yet ever usually currently normally always never really actually finally "
    "just even anymore lately recently today tonight not"
)
_KIND_NOUNS = _words("kind kinds type types sort sorts")
_TYPE_DETERMINERS = frozenset({"what", "which", "whose"})
_WH = frozenset({"what", "which", "whose", "who", "whom", "when", "where"})


def _answer_kind(words: Sequence[str], wh: int) -> tuple[list[str], int]:
    """The words naming the answer's kind after `what` / `which` / `whose` at `wh` (at most three, up
    to the auxiliary that must follow them, and "kind" itself in "what kind of"), and where the
    auxiliary is."""
    j = wh + 1
    kind: list[str] = []
    if j + 1 < len(words) and words[j] in _KIND_NOUNS and words[j + 1] == "of":
        kind.append(words[j])
        j += 2
    start = len(kind)
    while j < len(words) and len(kind) - start < 3 and words[j] not in _AUXILIARIES:
        if words[j] in _SUBJECT_PRONOUNS or words[j] in _PREPOSITIONS or words[j] in _DETERMINERS:
            return [], -1
        kind.append(words[j])
        j += 1
    if j < len(words) and words[j] in _AUXILIARIES:
        return kind, j
    return [], -1


def _main_verb(words: Sequence[str], aux: int) -> str | None:
    """The main verb after the auxiliary at `aux` and its subject (a pronoun, a name, or a determiner
    and its noun), past aspect adverbs: base form after do and the modals, -ing or -ed/-en after be,
    any form after have."""
    j = aux + 1
    if j >= len(words):
        return None
    # A determiner or a possessive ("Bori's") comes with its noun.
    j += 2 if words[j] in _DETERMINERS or words[j].endswith("'s") else 1
    while j < len(words) and words[j] in ASPECT_ADVERBS:
        j += 1
    if j >= len(words):
        return None
    verb, auxiliary = words[j], words[aux]
    if verb in _PREPOSITIONS or verb in _DETERMINERS or verb in _DO_AND_MODALS or verb in _BE:
        return None
    if auxiliary in _BE and not verb.endswith(("ing", "ed", "en")):
        return None
    return verb


def not_details(question: str) -> frozenset[str]:
    """The words of an English value question that name the answer's kind or the action asked about,
    casefolded as written ("database", "pick"); empty when the question is not shaped so."""
    words = _WORD.findall(question.casefold())
    wh = next((i for i, word in enumerate(words) if word in _WH), None)
    if wh is None:
        return frozenset()
    found: list[str] = []
    aux = next((i for i in range(wh + 1, len(words)) if words[i] in _AUXILIARIES), -1)
    if words[wh] in _TYPE_DETERMINERS:
        kind, kind_aux = _answer_kind(words, wh)
        found.extend(kind)
        if kind_aux >= 0:
            aux = kind_aux
    if words[wh] in {"who", "whom"} and wh + 1 < len(words) and words[wh + 1] not in _AUXILIARIES:
        found.append(words[wh + 1])  # a subject question: "who fixed the SSO bug"
    elif 0 <= aux <= wh + 6:
        verb = _main_verb(words, aux)
        if verb is not None:
            found.append(verb)
    return frozenset(found)
