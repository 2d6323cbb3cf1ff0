"""Safety administration against the real stack (gateway process, HTTP): per-tenant safety overrides, enterprise only,
and the audit of blocks and halts at /admin/v1/tenants/{id}/safety-events; the same overrides through the admin CLI."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from functions.cli import app as cli
from shared.fleet.tiers import SafetyOverrides, Tier
from shared.storage.safety_audit import SafetyAction, SafetyAuditRecord, SafetyDetector, SafetyLayer
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.safety_audit import SQLiteSafetyAudit
from shared.storage.timestamps import to_iso, utc_now
from tests.conftest import Stack

ADMIN = "/admin/v1"
NO_OVERRIDES = {"block_outbound_pii": None, "audit_raw_content": None}


class Admin:
    """The admin API of the stack's gateway, with a fresh admin key."""

    def __init__(self, stack: Stack) -> None:
        self.url = stack.gateway_url + ADMIN
        self.headers = {"authorization": f"Bearer {stack.admin_key()}"}

    def __call__(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.url + path, headers=self.headers, **kwargs)

    def tenant(self, tier: str, name: str = "t", **fields: Any) -> dict[str, Any]:
        created = self("post", "/tenants", json={"name": name, "tier": tier, **fields})
        assert created.status_code == 201, created.text
        return created.json()["tenant"]


@contextmanager
def audit_store(stack: Stack) -> Iterator[SQLiteSafetyAudit]:
    """The store the gateway reads (the stack's SQLite database), for writing records as the pipeline would."""
    store = SQLiteSafetyAudit(stack.data_dir / "fleetchat.db")
    try:
        yield store
    finally:
        store.close()


def event(request_id: str, tenant_id: str, at: datetime, layer: SafetyLayer = SafetyLayer.PRE) -> SafetyAuditRecord:
    return SafetyAuditRecord(
        request_id=request_id,
        tenant_id=tenant_id,
        key_id="key_x",
        at=at,
        layer=layer,
        detector=SafetyDetector.CLASSIFIER if layer is SafetyLayer.PRE else SafetyDetector.PII,
        category="illicit/violent" if layer is SafetyLayer.PRE else "EMAIL_ADDRESS",
        score=0.91,
        policy_version="2026-11-01",
        action=SafetyAction.BLOCKED if layer is SafetyLayer.PRE else SafetyAction.HALTED,
        model="mini",
        expires_at=at + timedelta(days=90),
    )


def assert_refused(response: httpx.Response, param: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param) and error["message"]


# -- safety overrides ------------------------------------------------------------------------------------------------


def test_tenants_show_their_effective_safety_policy(stack: Stack) -> None:
    admin = Admin(stack)
    free = admin.tenant("free")
    assert free["safety"] == {"block_outbound_pii": False, "audit_raw_content": False, "audit_retention_days": 30}
    assert free["safety_overrides"] is None
    corp = admin.tenant("enterprise", safety={"block_outbound_pii": True})
    assert corp["safety"] == {"block_outbound_pii": True, "audit_raw_content": False, "audit_retention_days": 365}
    assert corp["safety_overrides"] == {"block_outbound_pii": True, "audit_raw_content": None}
    assert admin("get", f"/tenants/{corp['id']}").json() == corp
    listed = {t["id"]: t for t in admin("get", "/tenants").json()["data"]}
    assert listed[corp["id"]]["safety"]["block_outbound_pii"] is True


def test_safety_overrides_are_for_enterprise_tenants_only(stack: Stack) -> None:
    admin = Admin(stack)
    before = len(admin("get", "/tenants").json()["data"])
    assert_refused(admin("post", "/tenants", json={"name": "p", "tier": "plus", "safety": {}}), "safety")
    assert_refused(
        admin("post", "/tenants", json={"name": "p", "tier": "free", "safety": {"audit_raw_content": True}}), "safety"
    )
    assert len(admin("get", "/tenants").json()["data"]) == before  # nothing was created

    plus, corp = admin.tenant("plus"), admin.tenant("enterprise", safety={"audit_raw_content": True})
    for tenant, body in (
        (plus, {"safety": {"block_outbound_pii": True}}),
        (plus, {"tier": "free", "safety": {"block_outbound_pii": True}}),
        (corp, {"tier": "plus", "safety": {"block_outbound_pii": True}}),  # the tier it would have is what counts
        (corp, {"tier": "plus", "name": "renamed", "safety": {"audit_raw_content": False}}),
    ):
        assert_refused(admin("patch", f"/tenants/{tenant['id']}", json=body), "safety")
        assert admin("get", f"/tenants/{tenant['id']}").json() == tenant  # and nothing changed
    assert_refused(admin("patch", f"/tenants/{corp['id']}", json={"safety": {"block_pii": True}}), "safety")
    assert_refused(admin("post", "/tenants", json={"name": "e", "tier": "enterprise", "safety": {"x": 1}}), "safety")

    upgraded = admin(
        "patch", f"/tenants/{plus['id']}", json={"tier": "enterprise", "safety": {"audit_raw_content": True}}
    )
    assert upgraded.status_code == 200, upgraded.text
    assert upgraded.json()["safety"] == {
        "block_outbound_pii": False,
        "audit_raw_content": True,
        "audit_retention_days": 365,
    }
    cleared = admin("patch", f"/tenants/{corp['id']}", json={"safety": None}).json()
    assert (cleared["safety"]["audit_raw_content"], cleared["safety_overrides"]) == (False, None)
    # Leaving enterprise keeps the stored overrides but they no longer apply: the tier's policy does.
    downgraded = admin("patch", f"/tenants/{plus['id']}", json={"tier": "plus"}).json()
    assert downgraded["safety"] == {"block_outbound_pii": False, "audit_raw_content": False, "audit_retention_days": 90}
    assert downgraded["safety_overrides"] == {**NO_OVERRIDES, "audit_raw_content": True}
    assert admin("patch", f"/tenants/{plus['id']}", json={"safety": None}).status_code == 200  # clearing is allowed


# -- safety events ---------------------------------------------------------------------------------------------------


def test_safety_events_list_one_tenants_records_newest_first(stack: Stack) -> None:
    admin = Admin(stack)
    tenant, other = admin.tenant("plus", "audited"), admin.tenant("plus", "neighbour")
    now = utc_now()
    with audit_store(stack) as store:
        store.record(event("req_old", tenant["id"], now - timedelta(days=40)))
        store.record(event("req_1", tenant["id"], now - timedelta(hours=2)))
        store.record(event("req_1", tenant["id"], now - timedelta(hours=2) + timedelta(seconds=5), SafetyLayer.POST))
        store.record(event("req_2", tenant["id"], now - timedelta(hours=1)))
        store.record(event("req_theirs", other["id"], now - timedelta(hours=1)))

    listed = admin("get", f"/tenants/{tenant['id']}/safety-events")  # default: the last 30 days
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert (body["object"], body["has_more"], body["next_end"]) == ("list", False, None)
    assert [(e["request_id"], e["layer"], e["action"]) for e in body["data"]] == [
        ("req_2", "pre", "blocked"),
        ("req_1", "post", "halted"),
        ("req_1", "pre", "blocked"),
    ]
    first = body["data"][0]
    assert first["object"] == "safety_event" and first["tenant_id"] == tenant["id"]
    assert (first["category"], first["detector"], first["score"], first["content"]) == (
        "illicit/violent",
        "classifier",
        0.91,
        None,
    )
    assert first["created_at"] == int((now - timedelta(hours=1)).timestamp())
    assert first["expires_at"] == int((now - timedelta(hours=1) + timedelta(days=90)).timestamp())

    # Paging through a wider range, two at a time, with next_end.
    params: dict[str, Any] = {"start": to_iso(now - timedelta(days=60)), "limit": 2}
    seen = []
    while True:
        page = admin("get", f"/tenants/{tenant['id']}/safety-events", params=params).json()
        seen += [(e["request_id"], e["layer"]) for e in page["data"]]
        if not page["has_more"]:
            break
        params["end"] = page["next_end"]
    assert seen == [("req_2", "pre"), ("req_1", "post"), ("req_1", "pre"), ("req_old", "pre")]

    in_unix = {"start": str(int((now - timedelta(hours=3)).timestamp())), "end": str(int(now.timestamp()) - 5400)}
    window = admin("get", f"/tenants/{tenant['id']}/safety-events", params=in_unix).json()["data"]
    assert [e["request_id"] for e in window] == ["req_1", "req_1"]
    theirs = admin("get", f"/tenants/{other['id']}/safety-events").json()["data"]
    assert [e["request_id"] for e in theirs] == ["req_theirs"]


def test_safety_events_are_admin_only_and_refuse_bad_input(stack: Stack, plus_key: str) -> None:
    admin = Admin(stack)
    tenant = admin.tenant("plus")
    path = f"/tenants/{tenant['id']}/safety-events"
    assert httpx.get(admin.url + path).status_code == 401
    assert httpx.get(admin.url + path, headers={"authorization": f"Bearer {plus_key}"}).status_code == 401
    missing = admin("get", f"/tenants/ten_{'0' * 32}/safety-events")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "tenant_id"
    for params, param in (
        ({"start": "yesterday"}, "start"),
        ({"end": "soon"}, "end"),
        ({"start": "2026-02-01", "end": "2026-01-01"}, "end"),
        ({"start": "2026-01-01", "end": "2026-01-01"}, "end"),
        ({"start": "2020-01-01", "end": "2026-01-01"}, "start"),
        ({"end": "0001-01-01"}, "end"),
    ):
        assert_refused(admin("get", path, params=params), param)
    for limit in ("0", "1001", "many"):
        response = admin("get", path, params={"limit": limit})
        assert response.status_code == 400 and "limit" in response.json()["error"]["param"]
    assert admin("get", "/tenants/ten_nope/safety-events").status_code in (400, 404)


# -- the admin CLI -----------------------------------------------------------------------------------------------------


def test_admin_cli_sets_safety_overrides_for_enterprise_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "fleetchat.db")
    plus, corp = store.create_tenant("plus", Tier.PLUS), store.create_tenant("corp", Tier.ENTERPRISE)
    runner = CliRunner()

    def update(tenant_id: str, *flags: str) -> Any:
        return runner.invoke(cli, ["tenants", "update", tenant_id, *flags, "--data-dir", str(tmp_path)])

    refused = update(plus.id, "--block-outbound-pii")
    assert refused.exit_code == 1 and "enterprise" in refused.output
    refused = update(corp.id, "--tier", "plus", "--audit-raw-content")
    assert refused.exit_code == 1
    assert store.get_tenant(plus.id) == plus and store.get_tenant(corp.id) == corp  # nothing changed

    done = update(corp.id, "--block-outbound-pii")
    assert done.exit_code == 0, done.output
    assert "'block_outbound_pii': True" in done.output
    assert update(corp.id, "--audit-raw-content").exit_code == 0  # a flag left out keeps its setting
    after = store.get_tenant(corp.id)
    assert after is not None and after.safety == SafetyOverrides(block_outbound_pii=True, audit_raw_content=True)
    assert update(corp.id, "--no-block-outbound-pii").exit_code == 0
    after = store.get_tenant(corp.id)
    assert after is not None and after.safety == SafetyOverrides(block_outbound_pii=False, audit_raw_content=True)
    assert update(corp.id, "--clear-safety").exit_code == 0
    after = store.get_tenant(corp.id)
    assert after is not None and after.safety is None
    assert update(plus.id, "--tier", "enterprise", "--block-outbound-pii").exit_code == 0  # upgraded in the same call
    upgraded = store.get_tenant(plus.id)
    assert upgraded is not None and upgraded.tier is Tier.ENTERPRISE and upgraded.safety is not None
    store.close()
