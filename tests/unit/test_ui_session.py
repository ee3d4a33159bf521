"""The memory browser's session tokens: signed, expiring, and tied to a key that is still configured."""

from __future__ import annotations

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
