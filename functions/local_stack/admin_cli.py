"""Admin commands on the configured account store: `fleetchat tenants|users|keys ...` and `fleetchat admin-key create`.

They talk to the store directly (SQLite locally; DynamoDB when FLEETCHAT_ACCOUNTS_STORE=aws), like the admin API does.
Keys are printed once, at creation, and never again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from functions.accounts.operations import create_tenant_with_key, mint_admin_key, mint_api_key
from shared.errors import FleetchatError
from shared.fleet.tables import limits_for, safety_for
from shared.fleet.tiers import LimitOverrides, SafetyOverrides, Tier
from shared.service_api.account_api import check_safety_tier
from shared.settings import Settings
from shared.storage.accounts import TenantChanges, TenantPurpose, TenantStore
from shared.storage.factory import open_tenant_store

tenants = typer.Typer(help="Tenants: create, list, change tier, limits, safety and billing.", no_args_is_help=True)
users = typer.Typer(help="Users of a tenant.", no_args_is_help=True)
keys = typer.Typer(help="API keys: create (shown once), list, revoke.", no_args_is_help=True)
admin_keys = typer.Typer(help="Admin keys for the /admin/v1 API.", no_args_is_help=True)

DataDir = Annotated[Path | None, typer.Option(help="Where the database lives (local store).")]
console = Console()


@contextmanager
def _store(data_dir: Path | None) -> Iterator[TenantStore]:
    settings = Settings(data_dir=data_dir) if data_dir is not None else Settings()
    store = open_tenant_store(settings)
    try:
        yield store
    except (FleetchatError, ValueError) as exc:
        typer.echo(f"error: {getattr(exc, 'message', exc)}", err=True)
        raise typer.Exit(code=1) from exc
    finally:
        store.close()


def _show_key(key: str) -> None:
    console.print(f"API key (shown once, store it now): [bold]{key}[/]")


@tenants.command("create")
def create_tenant(
    name: Annotated[str, typer.Argument(help="Display name.")],
    tier: Annotated[Tier, typer.Option(help="free, plus or enterprise.")] = Tier.FREE,
    key_label: Annotated[str | None, typer.Option(help="Also create a first API key with this label.")] = None,
    purpose: Annotated[
        TenantPurpose, typer.Option(help="customer, or eval: the eval job's tenant (never billed).")
    ] = TenantPurpose.CUSTOMER,
    data_dir: DataDir = None,
) -> None:
    """Create a tenant (and optionally its first key)."""
    with _store(data_dir) as store:
        if key_label is None:
            tenant = store.create_tenant(name, tier, purpose=purpose)
        else:
            tenant, minted = create_tenant_with_key(store, name, tier, key_label, purpose=purpose)
            _show_key(minted.key)
    console.print(f"tenant {tenant.id} ({tenant.name}, {tenant.tier.value}, {tenant.purpose.value})")


@tenants.command("list")
def list_tenants(data_dir: DataDir = None) -> None:
    """Every tenant with its tier, effective limits and billing customer."""
    with _store(data_dir) as store:
        table = Table(
            "id", "name", "tier", "key rpm/tpm", "tenant rpm/tpm", "message cap", "stripe customer", "purpose"
        )
        for tenant in store.list_tenants():
            limits = limits_for(tenant.tier, tenant.limits)
            table.add_row(
                tenant.id,
                tenant.name,
                tenant.tier.value,
                f"{limits.key_rpm}/{limits.key_tpm}",
                f"{limits.tenant_rpm}/{limits.tenant_tpm}",
                str(limits.message_cap or "-"),
                tenant.stripe_customer_id or "-",
                tenant.purpose.value,
            )
    console.print(table)


@tenants.command("update")
def update_tenant(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")],
    tier: Annotated[Tier | None, typer.Option(help="A new tier.")] = None,
    key_rpm: Annotated[int | None, typer.Option(min=1, help="Override: requests/min per key.")] = None,
    key_tpm: Annotated[int | None, typer.Option(min=1, help="Override: tokens/min per key.")] = None,
    tenant_rpm: Annotated[int | None, typer.Option(min=1, help="Override: requests/min for the tenant.")] = None,
    tenant_tpm: Annotated[int | None, typer.Option(min=1, help="Override: tokens/min for the tenant.")] = None,
    message_cap: Annotated[int | None, typer.Option(min=1, help="Override: messages per rolling window.")] = None,
    clear_limits: Annotated[bool, typer.Option("--clear-limits", help="Drop all limit overrides.")] = False,
    stripe_customer: Annotated[str | None, typer.Option(help="Bill usage to this Stripe customer (cus_...).")] = None,
    block_outbound_pii: Annotated[
        bool | None,
        typer.Option("--block-outbound-pii/--no-block-outbound-pii", help="Enterprise: halt output containing PII."),
    ] = None,
    audit_raw_content: Annotated[
        bool | None,
        typer.Option(
            "--audit-raw-content/--no-audit-raw-content",
            help="Enterprise: keep PII-redacted content in safety and server-tool audit records.",
        ),
    ] = None,
    clear_safety: Annotated[bool, typer.Option("--clear-safety", help="Drop the safety overrides.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Change a tenant's tier, limit or safety overrides, or Stripe customer; takes effect on its next request.

    Safety overrides are for enterprise tenants only; a flag left out keeps its current setting."""
    safety = {"block_outbound_pii": block_outbound_pii, "audit_raw_content": audit_raw_content}
    safety = {name: value for name, value in safety.items() if value is not None}
    overrides = {"key_rpm": key_rpm, "key_tpm": key_tpm, "tenant_rpm": tenant_rpm, "tenant_tpm": tenant_tpm,
                 "message_cap": message_cap}  # fmt: skip
    fields: dict[str, object] = {}
    if tier is not None:
        fields["tier"] = tier
    if clear_limits:
        fields["limits"] = None
    elif any(v is not None for v in overrides.values()):
        fields["limits"] = LimitOverrides(**{k: v for k, v in overrides.items() if v is not None})
    if stripe_customer is not None:
        fields["stripe_customer_id"] = stripe_customer
    if clear_safety:
        fields["safety"] = None
    with _store(data_dir) as store:
        current = store.get_tenant(tenant_id)
        if current is None:
            raise ValueError(f"no tenant {tenant_id!r}")
        if isinstance(fields.get("limits"), LimitOverrides) and current.limits is not None:
            merged = current.limits.model_dump(exclude_none=True) | fields["limits"].model_dump(exclude_none=True)  # type: ignore[union-attr]
            fields["limits"] = LimitOverrides(**merged)
        if safety and not clear_safety:
            kept = current.safety.model_dump(exclude_none=True) if current.safety is not None else {}
            fields["safety"] = SafetyOverrides(**(kept | safety))
        chosen = fields.get("safety")
        check_safety_tier(tier or current.tier, chosen if isinstance(chosen, SafetyOverrides) else None)
        tenant = store.update_tenant(tenant_id, TenantChanges(**fields))  # type: ignore[arg-type]
    assert tenant is not None
    limits = limits_for(tenant.tier, tenant.limits)
    console.print(f"{tenant.id}: {tenant.tier.value}; limits {limits.model_dump()}; stripe {tenant.stripe_customer_id}")
    console.print(f"safety {safety_for(tenant.tier, tenant.safety).model_dump()}")


@users.command("create")
def create_user(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")],
    email: Annotated[str, typer.Argument(help="The user's email, unique within the tenant.")],
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Add a user to a tenant."""
    with _store(data_dir) as store:
        if store.get_tenant(tenant_id) is None:
            raise ValueError(f"no tenant {tenant_id!r}")
        user = store.create_user(tenant_id, email, name)
    console.print(f"user {user.id} ({user.email}) in {user.tenant_id}")


@users.command("list")
def list_users(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")], data_dir: DataDir = None
) -> None:
    """A tenant's users."""
    with _store(data_dir) as store:
        table = Table("id", "email", "name", "created")
        for user in store.list_users(tenant_id):
            table.add_row(user.id, user.email, user.name or "-", f"{user.created_at:%Y-%m-%d %H:%M}")
    console.print(table)


@keys.command("create")
def create_key(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")],
    label: Annotated[str, typer.Option(help="What the key is for.")] = "api key",
    user: Annotated[str | None, typer.Option(help="The user (usr_...) the key belongs to.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Create an API key; it is printed once and only its hash is stored."""
    with _store(data_dir) as store:
        minted = mint_api_key(store, tenant_id, label, user_id=user)
    _show_key(minted.key)
    console.print(f"key id {minted.record.id} ({minted.record.hint}) for {tenant_id}")


@keys.command("list")
def list_keys(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")], data_dir: DataDir = None
) -> None:
    """A tenant's keys (hints only; a key cannot be shown again)."""
    with _store(data_dir) as store:
        table = Table("id", "hint", "label", "user", "created", "revoked")
        for record in store.list_keys(tenant_id):
            revoked = "-" if record.revoked_at is None else f"{record.revoked_at:%Y-%m-%d %H:%M}"
            table.add_row(record.id, record.hint, record.label, record.user_id or "-",
                          f"{record.created_at:%Y-%m-%d %H:%M}", revoked)  # fmt: skip
    console.print(table)


@keys.command("revoke")
def revoke_key(key_id: Annotated[str, typer.Argument(help="The key id (key_...).")], data_dir: DataDir = None) -> None:
    """Revoke a key: requests with it fail from now on."""
    with _store(data_dir) as store:
        record = store.revoke_key(key_id)
        if record is None:
            raise ValueError(f"no key {key_id!r}")
    console.print(f"revoked {record.id} ({record.hint}) at {record.revoked_at:%Y-%m-%d %H:%M:%S} UTC")


@admin_keys.command("create")
def create_admin_key(
    label: Annotated[str, typer.Option(help="Who or what uses it.")] = "admin", data_dir: DataDir = None
) -> None:
    """Create an admin key for /admin/v1 (printed once)."""
    with _store(data_dir) as store:
        minted = mint_admin_key(store, label)
    console.print(f"admin key (shown once, store it now): [bold]{minted.key}[/]  id {minted.record.id}")


def register(app: typer.Typer) -> None:
    app.add_typer(tenants, name="tenants")
    app.add_typer(users, name="users")
    app.add_typer(keys, name="keys")
    app.add_typer(admin_keys, name="admin-key")
