"""The local stack's worker credential: one key per data dir (`worker_api_key`, mode 0600) that `fleetchat up` hands
to every worker it starts and to its gateway, so a worker on loopback answers only the gateway of its own stack."""

from __future__ import annotations

import secrets

from pydantic import SecretStr

from functions.accounts.private_files import read_private, write_private
from shared.settings import Settings

WORKER_KEY_ENV = "FLEETCHAT_WORKER_API_KEY"


def stack_worker_key(settings: Settings) -> str:
    """FLEETCHAT_WORKER_API_KEY when set; else the data dir's key, created on first use. Delete the file and restart
    the stack to rotate it (every worker restarts with the stack)."""
    if settings.worker.api_key is not None:
        return settings.worker.api_key.get_secret_value()
    path = settings.worker_key_path
    key = read_private(path)
    if not key:
        key = secrets.token_urlsafe(32)
        write_private(path, key)
    return key


def with_worker_key(settings: Settings, key: str) -> Settings:
    """`settings` whose gateway presents `key` to its workers."""
    return settings.model_copy(update={"worker": settings.worker.model_copy(update={"api_key": SecretStr(key)})})


def presenting_stack_key(settings: Settings) -> Settings:
    """`settings` presenting the worker key a tool outside the gateway needs (the doctor, the benchmark's direct
    mode): FLEETCHAT_WORKER_API_KEY, else the data dir's key if the stack made one (never creates it)."""
    if settings.worker.api_key is not None:
        return settings
    key = read_private(settings.worker_key_path)
    return with_worker_key(settings, key) if key else settings
