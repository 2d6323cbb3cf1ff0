"""Session cookies: signed, expiring, tamper-evident; the local secret is created once with mode 0600."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from functions.accounts.sessions import SessionSigner, load_or_create_secret

SECRET = b"s" * 48


def test_a_cookie_names_its_key_hash_until_it_expires() -> None:
    signer = SessionSigner(SECRET)
    token, expires = signer.issue("abc123", ttl_s=60, now=1000)
    assert expires == 1060
    assert signer.verify(token, now=1059) == "abc123"
    assert signer.verify(token, now=1060) is None


@pytest.mark.parametrize("tamper", ["payload", "mac", "secret", "garbage"])
def test_tampered_cookies_are_rejected(tamper: str) -> None:
    signer = SessionSigner(SECRET)
    token, _ = signer.issue("abc123", now=1000)
    payload, mac = token.split(".")
    forged = {
        "payload": SessionSigner(b"x" * 48).issue("evil", now=1000)[0].split(".")[0] + "." + mac,
        "mac": payload + "." + mac[:-1] + ("A" if mac[-1] != "A" else "B"),
        "secret": SessionSigner(b"x" * 48).issue("abc123", now=1000)[0],
        "garbage": "not-a-cookie",
    }[tamper]
    assert signer.verify(forged, now=1001) is None


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError):
        SessionSigner(b"short")


def test_the_local_secret_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "session_secret"
    first = load_or_create_secret(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secret(path) == first and len(first) >= 32
