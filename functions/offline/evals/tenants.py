"""The eval tenants: one per tier, purpose `eval` (never billed), created through the admin API when missing.

Their keys live in a 0600 file in the reports directory (`eval_keys.json`); they are never printed or logged.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from pydantic import BaseModel

from functions.accounts.private_files import read_private, write_private
from shared.fleet.tiers import Tier

KEYS_FILE = "eval_keys.json"
# The tiers the suites need at least (routing: free lands on mini, plus on flagship).
EVAL_TIERS: tuple[Tier, ...] = (Tier.FREE, Tier.PLUS)


# The eval tenants keep their tier's pools, routing, safety and latency objectives, but not its rate limits: a run
# sends a few dozen requests a minute per tier, and the free tier's message cap (40 per 3 h) would refuse the second
# run of the day. What the suites measure is unaffected by admission limits.
EVAL_LIMITS = {
    "key_rpm": 600,
    "tenant_rpm": 600,
    "key_tpm": 4_000_000,
    "tenant_tpm": 4_000_000,
    "message_cap": 100_000,
}


class EvalKeyError(RuntimeError):
    """No usable eval key for a tier, and no admin key to create one."""


class _Stored(BaseModel):
    keys: dict[Tier, str] = {}
    base_url: str | None = None  # the deployment the keys belong to


def _key_works(http: httpx.Client, base_url: str, key: str) -> bool:
    response = http.get(f"{base_url}/v1/models", headers={"authorization": f"Bearer {key}"})
    if response.status_code == 401:
        return False
    response.raise_for_status()
    return True


def _create(http: httpx.Client, base_url: str, admin_key: str, tier: Tier) -> str:
    response = http.post(
        f"{base_url}/admin/v1/tenants",
        headers={"authorization": f"Bearer {admin_key}"},
        json={"name": f"eval-{tier.value}", "tier": tier.value, "key_label": "eval job", "purpose": "eval"},
    )
    if response.status_code in (401, 403):
        raise EvalKeyError("the admin key was refused: cannot create the eval tenants")
    response.raise_for_status()
    body = response.json()
    if body["tenant"].get("purpose") != "eval":
        raise EvalKeyError("the deployment does not know tenant purposes: it would bill eval traffic; not running")
    patched = http.patch(
        f"{base_url}/admin/v1/tenants/{body['tenant']['id']}",
        headers={"authorization": f"Bearer {admin_key}"},
        json={"limits": EVAL_LIMITS},
    )
    patched.raise_for_status()
    return str(body["api_key"]["key"])


def ensure_eval_keys(
    base_url: str,
    keys_path: Path,
    *,
    given: dict[Tier, str] | None = None,
    admin_key: str | None = None,
    tiers: tuple[Tier, ...] = EVAL_TIERS,
    timeout_s: float = 30.0,
) -> dict[Tier, str]:
    """A working eval key per tier: the given ones, else those in the keys file (if the deployment still knows them),
    else new eval tenants created with the admin key (and saved)."""
    keys = dict(given or {})
    text = read_private(keys_path)
    stored = _Stored.model_validate_json(text) if text else _Stored()
    if stored.base_url not in (None, base_url):
        stored = _Stored()  # keys of another deployment
    changed = False
    with httpx.Client(timeout=timeout_s) as http:
        for tier in tiers:
            if tier in keys:
                continue
            key = stored.keys.get(tier)
            if key is not None and _key_works(http, base_url, key):
                keys[tier] = key
                continue
            if admin_key is None:
                raise EvalKeyError(
                    f"no eval key for tier {tier.value!r}: pass one, or an admin key to create the eval tenants"
                )
            keys[tier] = stored.keys[tier] = _create(http, base_url, admin_key, tier)
            changed = True
    if changed:
        stored.base_url = base_url
        write_private(keys_path, json.dumps(stored.model_dump(mode="json"), indent=2) + "\n")
    return keys
