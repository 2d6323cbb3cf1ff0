"""The Stripe key: its mode (test or live) fits the environment, Stripe accepts it, and the meters it bills exist."""

from __future__ import annotations

import stripe

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from shared.settings import Settings

TEST_PREFIXES = ("sk_test_", "rk_test_")
LIVE_PREFIXES = ("sk_live_", "rk_live_")


def key_mode(key: str) -> str | None:
    """ "test", "live", or None for something that is not a secret or restricted key (a publishable pk_ key, say)."""
    if key.startswith(TEST_PREFIXES):
        return "test"
    if key.startswith(LIVE_PREFIXES):
        return "live"
    return None


def check_mode(settings: Settings) -> list[CheckResult]:
    name = "key mode"
    if settings.stripe.api_key is None:
        if settings.environment == "deployed":
            hint = "set FLEETCHAT_STRIPE_API_KEY in the fleetchat-secrets secret to bill usage"
            return [warn("stripe", name, "no key: usage stays in the ledger, nothing is billed", hint)]
        return [ok("stripe", name, "no key: ledger only (local default)")]
    mode = key_mode(settings.stripe.api_key.get_secret_value())
    if mode is None:
        hint = "use a secret (sk_) or restricted (rk_) key; a publishable pk_ key cannot send meter events"
        return [fail("stripe", name, "not a Stripe secret or restricted key", hint)]
    if mode == "live" and settings.environment == "local":
        hint = "use a sk_test_ key locally: a live key bills real customers for test traffic"
        return [fail("stripe", name, "live key on a local stack", hint)]
    if mode == "test" and settings.environment == "deployed":
        hint = "fine for staging; production needs a sk_live_ / rk_live_ key or nothing is really billed"
        return [warn("stripe", name, "test key on a deployment", hint)]
    return [ok("stripe", name, f"{mode} key, {settings.environment} environment")]


def check_api(settings: Settings, timeout_s: float) -> list[CheckResult]:
    """Lists the account's billing meters (a read): the key is accepted and every meter the ledger feeds is active."""
    if settings.stripe.api_key is None or key_mode(settings.stripe.api_key.get_secret_value()) is None:
        return []
    name = "API"
    http = stripe.new_default_http_client(timeout=timeout_s)
    client = stripe.StripeClient(
        settings.stripe.api_key.get_secret_value(),
        base_addresses={"api": settings.stripe.api_base} if settings.stripe.api_base else None,
        max_network_retries=0,
        http_client=http,
    )
    try:
        meters = client.v1.billing.meters.list({"limit": 100})
    except stripe.AuthenticationError:
        return [
            fail("stripe", name, "the key was refused (401)", "rotate FLEETCHAT_STRIPE_API_KEY: it is revoked or wrong")
        ]
    except stripe.PermissionError:
        hint = "give the restricted key 'Billing meters: read' to let doctor check the meters"
        return [warn("stripe", name, "key accepted; meters unreadable (restricted key)", hint)]
    except stripe.APIConnectionError as exc:
        hint = "check the network path to api.stripe.com (or FLEETCHAT_STRIPE_API_BASE)"
        return [fail("stripe", name, f"unreachable: {exc.user_message or exc}"[:300], hint)]
    finally:
        http.close()
    active = {meter.event_name for meter in meters.data if meter.status == "active"}
    wanted = [settings.meter.event_input, settings.meter.event_cached_input, settings.meter.event_output]
    missing = [event for event in wanted if event not in active]
    if missing:
        hint = "create a Billing meter for each (Dashboard → Billing → Meters, event name as shown)"
        return [fail("stripe", name, f"no active meter for {missing}: that usage is not billed", hint)]
    return [ok("stripe", name, f"reachable; meters {', '.join(wanted)} active")]
