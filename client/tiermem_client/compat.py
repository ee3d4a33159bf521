"""The deprecated argument order of `search`, kept working without ever changing a call's meaning.

`search(query, *, user_id=...)` is the documented form (mem0's order). Calls written for the old
`search(user_id, query)` still run, with a `DeprecationWarning` that spells out the new call:
- two positional arguments are always the old order, because the new form takes only one: a call that
  worked before means what it meant before;
- one positional argument plus `query=` is the old order too (`search("alice", query="...")`);
- when the first of two positional arguments cannot be a user id (it has spaces, say), the caller
  most likely meant `search(query, user_id)`: that is refused with a `TypeError`, never guessed.
Type checkers see the old forms as deprecated overloads (PEP 702) and flag them.
"""

from __future__ import annotations

import re
import warnings

from tiermem_client.events import ID_PATTERN

LEGACY_SEARCH = "search(user_id, query) is deprecated: call search(query, user_id=...)"
_USER_ID = re.compile(ID_PATTERN)


def _legacy(user_id: str, query: str) -> tuple[str, str]:
    if not _USER_ID.fullmatch(user_id):
        raise TypeError(
            f"search() takes the query first and the user as a keyword: search(query, user_id=...); "
            f"{user_id!r} is not a user id, so this call is not the deprecated search(user_id, query) either"
        )
    warnings.warn(f"{LEGACY_SEARCH}, here search({query!r}, user_id={user_id!r})", DeprecationWarning, stacklevel=4)
    return query, user_id


def search_arguments(args: tuple[str, ...], query: str | None, user_id: str | None) -> tuple[str, str]:
    """(query, user_id) of a `search` call in the documented form or in the deprecated one."""
    if len(args) > 2:
        raise TypeError(f"search() takes at most 2 positional arguments ({len(args)} given)")
    if len(args) == 2 or (len(args) == 1 and query is not None):
        if user_id is not None or (len(args) == 2 and query is not None):
            raise TypeError("search(): give the query first and user_id= as a keyword, nothing else")
        return _legacy(args[0], args[1] if len(args) == 2 else str(query))
    if args:
        query = args[0]
    if query is None:
        raise TypeError("search() missing the query: search(query, user_id=...)")
    if user_id is None:
        raise TypeError("search() missing the keyword argument user_id: search(query, user_id=...)")
    return query, user_id
