"""Web sessions: a signed, HttpOnly cookie that names an API key by its hash, so the browser never holds the key.

The cookie is `base64url(json {"h": key hash, "exp": unix time}) "." base64url(HMAC-SHA256)`. Every request re-reads
the key by its hash, so revoking the key ends its sessions at once. Requests that change state with a cookie must carry
`X-Requested-With: fleetchat`: a cross-site form or image cannot send a custom header (CSRF).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from functions.accounts.private_files import read_private, write_private

SESSION_COOKIE = "fleetchat_session"
CSRF_HEADER = "x-requested-with"
CSRF_VALUE = "fleetchat"
SESSION_TTL_S = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class SessionClaims(BaseModel):
    h: str  # the API key's SHA-256 hash
    exp: int  # unix seconds


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("the session secret must be at least 32 bytes")
        self._secret = secret

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    def issue(self, key_hash: str, ttl_s: int = SESSION_TTL_S, now: float | None = None) -> tuple[str, int]:
        """(cookie value, expiry as unix seconds)."""
        expires = int((now if now is not None else time.time()) + ttl_s)
        payload = _b64(SessionClaims(h=key_hash, exp=expires).model_dump_json().encode())
        return f"{payload}.{self._mac(payload)}", expires

    def verify(self, token: str, now: float | None = None) -> str | None:
        """The key hash a valid, unexpired cookie names; None for anything else."""
        payload, _, mac = token.partition(".")
        if not payload or not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            return None
        try:
            claims = SessionClaims.model_validate(json.loads(_unb64(payload)))
        except (ValueError, ValidationError):
            return None
        if claims.exp <= (now if now is not None else time.time()):
            return None
        return claims.h


def load_or_create_secret(path: Path) -> bytes:
    """The local session secret: created once (0600) in the data dir, so sessions survive a restart."""
    secret = read_private(path)
    if secret is None or len(secret) < 32:
        secret = secrets.token_urlsafe(48)
        write_private(path, secret)
    return secret.encode()
