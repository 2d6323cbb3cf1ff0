"""API key minting and hashing: keys are shown once and only their SHA-256 hash is ever stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "fc-"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def hashes_match(a: str, b: str) -> bool:
    """Constant-time comparison so a timing probe learns nothing about a stored hash."""
    return hmac.compare_digest(a.encode(), b.encode())
