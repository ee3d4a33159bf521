"""The memory browser's session tokens: signed, expiring, tied to a key that is still configured,
ended by logout, and never an error whatever the cookie holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.recall_api.ui.session import SessionSigner, csrf_matches

KEYS = {"Kq7uV2xP9sLm4Tz8RbN3wYc6-local": "local", "Zp4Lx8Qw2Vn7Km5Rt9Hs3Jd6-other": "other"}
LOCAL_KEY = "Kq7uV2xP9sLm4Tz8RbN3wYc6-local"


def test_a_token_names_the_tenant_of_its_key_and_never_the_key() -> None:
    signer = SessionSigner(secret=b"s" * 32)
    token = signer.issue(LOCAL_KEY, now=1000)
    session = signer.check(token, KEYS, now=1001)
    assert session is not None and session.tenant_id == "local"
    assert LOCAL_KEY not in token
    assert csrf_matches(session, session.csrf_token) and not csrf_matches(session, "0" * 64)
    assert not csrf_matches(session, None)


def test_tampered_expired_foreign_and_revoked_tokens_are_no_session() -> None:
    signer = SessionSigner(secret=b"s" * 32, max_age_s=60)
    token = signer.issue(LOCAL_KEY, now=1000)
    assert signer.check(token[:-1] + ("0" if token[-1] != "0" else "1"), KEYS, now=1001) is None
    assert signer.check(token, KEYS, now=1061) is None, "expired"
    assert signer.check(token, KEYS, now=999 - 1) is None, "issued in the future"
    assert SessionSigner(secret=b"t" * 32).check(token, KEYS, now=1001) is None, "another process's secret"
    revoked = {k: v for k, v in KEYS.items() if k != LOCAL_KEY}
    assert signer.check(token, revoked, now=1001) is None, "the key was removed from the configuration"
    assert signer.check(None, KEYS) is None and signer.check("v1.x.y.z.w", KEYS) is None
    assert signer.check("x" * 301, KEYS) is None


def test_each_login_has_its_own_csrf_token() -> None:
    signer = SessionSigner(secret=b"s" * 32)
    first = signer.check(signer.issue(LOCAL_KEY, now=1000), KEYS, now=1000)
    second = signer.check(signer.issue(LOCAL_KEY, now=1000), KEYS, now=1000)
    assert first is not None and second is not None and first.csrf_token != second.csrf_token


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=400) | st.builds(lambda parts: ".".join(parts), st.lists(st.text(max_size=70), max_size=7)))
def test_no_cookie_value_makes_checking_fail(token: str) -> None:
    """Whatever a client puts in the cookie (non-ASCII, `v1.é.é.1.é`, five dotted parts of anything)
    is no session, never an exception."""
    signer = SessionSigner(secret=b"s" * 32)
    assert signer.check(token, KEYS) is None
    signer.revoke(token)


def test_the_reported_cookie_is_no_session() -> None:
    signer = SessionSigner(secret=b"s" * 32)
    for token in ("v1.é.é.1.é", "v1.é.é.١٢.é", "v1." + "é" * 32 + "." + "0" * 32 + ".1." + "0" * 64):
        assert signer.check(token, KEYS) is None


def test_a_logged_out_token_is_refused_and_other_sessions_stay() -> None:
    signer = SessionSigner(secret=b"s" * 32)
    first, second = signer.issue(LOCAL_KEY, now=1000), signer.issue(LOCAL_KEY, now=1000)
    signer.revoke(first)
    assert signer.check(first, KEYS, now=1001) is None, "the cookie replayed after logout"
    assert signer.check(second, KEYS, now=1001) is not None, "another browser's session of the same key"
    signer.revoke(first)  # twice is harmless


def test_the_table_of_live_sessions_is_bounded_and_ends_the_oldest() -> None:
    signer = SessionSigner(secret=b"s" * 32, max_live_sessions=2)
    tokens = [signer.issue(LOCAL_KEY, now=1000 + i) for i in range(3)]
    assert signer.check(tokens[0], KEYS, now=1003) is None
    assert all(signer.check(token, KEYS, now=1003) is not None for token in tokens[1:])
    assert len(signer._live) == 2


def test_expired_sessions_leave_the_table() -> None:
    signer = SessionSigner(secret=b"s" * 32, max_age_s=60)
    signer.issue(LOCAL_KEY, now=1000)
    signer.issue(LOCAL_KEY, now=2000)
    assert len(signer._live) == 1


def test_a_non_ascii_csrf_token_does_not_match() -> None:
    signer = SessionSigner(secret=b"s" * 32)
    session = signer.check(signer.issue(LOCAL_KEY, now=1000), KEYS, now=1000)
    assert session is not None and not csrf_matches(session, "é" * 64)
