"""Share links through the gateway (real HTTP, the openai SDK, SQLite files, an echoing stand-in worker): a snapshot at
an unguessable URL readable without a key, as JSON and as a page with the service's CSP and noindex; later turns do
not change it; personal data flagged before sharing; revoked, expired, deleted-with-the-conversation, erased-with-the-
account and turned-off links are 404s; the owner alone lists and revokes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from functions.api.web_ui import CONTENT_SECURITY_POLICY
from shared.api_keys import hash_api_key, new_api_key
from shared.storage.shares import Share, SharedMessage, new_share_id, new_share_token, token_hash
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.shares import SQLiteShares
from shared.storage.timestamps import utc_now
from tests.integration.accounts.test_conversations_api import Setup, echo_setup
from tests.integration.conftest import GatewayFactory


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with echo_setup(gateway_for) as ready:
        yield ready


def share(setup: Setup, conversation_id: str, key: str | None = None, **body: object) -> httpx.Response:
    return setup.send("POST", f"/v1/conversations/{conversation_id}/shares", key, json=body)


def public(setup: Setup, path: str) -> httpx.Response:
    return httpx.get(f"{setup.gw.url}{path}", timeout=10)  # no key, no cookie


def token_of(url: str) -> str:
    return url.removeprefix("/s/")


def test_a_link_shows_a_snapshot_without_a_key_as_json_and_as_a_page(setup: Setup) -> None:
    conversation_id = setup.start("Plan a trip to Lisbon <script>alert(1)</script>")["conversation"]["id"]
    made = share(setup, conversation_id)
    assert made.status_code == 200, made.text
    link = made.json()
    assert link["url"].startswith("/s/") and len(token_of(link["url"])) >= 32 and link["message_count"] == 2
    setup.say(conversation_id, "Three days only")  # later turns do not change the snapshot

    shown = public(setup, f"/v1/shared/{token_of(link['url'])}")
    assert shown.status_code == 200 and "noindex" in shown.headers["x-robots-tag"]
    assert [(m["role"], m["content"]) for m in shown.json()["messages"]] == [
        ("user", "Plan a trip to Lisbon <script>alert(1)</script>"),
        ("assistant", "echo: Plan a trip to Lisbon <script>alert(1)</script>"),
    ]
    page = public(setup, link["url"])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert '<meta name="robots" content="noindex, nofollow">' in page.text and "noindex" in page.headers["x-robots-tag"]
    assert "<script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "Three days only" not in page.text
    assert public(setup, "/s/share.css").headers["content-type"].startswith("text/css")

    listed = setup.get(f"/v1/conversations/{conversation_id}/shares").json()["data"]
    assert [(s["id"], s["url"]) for s in listed] == [(link["id"], None)]  # the URL is shown once
    assert setup.get(f"/v1/conversations/{conversation_id}/shares", setup.gw.other_key).status_code == 404


def test_personal_data_is_flagged_before_sharing(setup: Setup) -> None:
    conversation_id = setup.start("Write to me at maria.silva@example.com about Lisbon")["conversation"]["id"]
    refused = share(setup, conversation_id)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("pii_in_share", "acknowledge_pii")
    assert "email in message 1; email in message 2" in error["message"]  # the echo repeats it
    assert setup.get(f"/v1/conversations/{conversation_id}/shares").json()["data"] == []
    assert share(setup, conversation_id, acknowledge_pii=True).status_code == 200


def test_revoked_deleted_and_erased_links_are_gone(setup: Setup) -> None:
    first = setup.start()["conversation"]["id"]
    second = setup.start("Plan a trip to Porto")["conversation"]["id"]
    revoked, deleted, erased = share(setup, first).json(), share(setup, second).json(), share(setup, first).json()
    assert setup.send("DELETE", f"/v1/shares/{revoked['id']}", setup.gw.other_key).status_code == 404
    assert setup.send("DELETE", f"/v1/shares/{revoked['id']}").json()["deleted"] is True
    assert public(setup, revoked["url"]).status_code == 404
    assert public(setup, f"/v1/shared/{token_of(revoked['url'])}").json()["error"]["type"] == "invalid_request_error"
    assert public(setup, erased["url"]).status_code == 200
    setup.send("DELETE", f"/v1/conversations/{second}")
    assert public(setup, deleted["url"]).status_code == 404
    setup.send("DELETE", "/v1/account/data")
    assert public(setup, erased["url"]).status_code == 404
    assert public(setup, f"/s/{new_share_token()}").status_code == 404


def test_an_expired_link_and_a_tenant_without_sharing(setup: Setup) -> None:
    conversation_id = setup.start()["conversation"]["id"]
    tenants = SQLiteStore(setup.gw.data_dir / "fleetchat.db")
    shares = SQLiteShares(setup.gw.data_dir / "fleetchat.db")
    try:
        tenant_id = next(t.id for t in tenants.list_tenants() if t.name == "owner")
        now, token = utc_now(), new_share_token()
        old = Share(
            id=new_share_id(), tenant_id=tenant_id, conversation_id=conversation_id, title="old",
            messages=[SharedMessage(role="user", content="hi", created_at=now)],
            created_at=now - timedelta(days=31), expires_at=now - timedelta(seconds=1),
        )  # fmt: skip
        shares.create(old, token_hash(token))
        assert public(setup, f"/s/{token}").status_code == 404
        live = share(setup, conversation_id, expires_in_days=1).json()
        assert public(setup, live["url"]).status_code == 200
        admin = new_api_key()
        tenants.add_admin_key(hash_api_key(admin), "ops")
        turned_off = httpx.patch(
            f"{setup.gw.url}/admin/v1/tenants/{tenant_id}", json={"sharing_disabled": True},
            headers={"authorization": f"Bearer {admin}"}, timeout=10,
        )  # fmt: skip
        assert turned_off.status_code == 200 and turned_off.json()["sharing_disabled"] is True
        assert public(setup, live["url"]).status_code == 404
        refused = share(setup, conversation_id)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "sharing_disabled"
    finally:
        shares.close()
        tenants.close()


@pytest.mark.parametrize("body", [{"expires_in_days": 0}, {"expires_in_days": 366}, {"public": True}])
def test_bad_requests_are_400s_and_make_nothing(setup: Setup, body: dict[str, object]) -> None:
    conversation_id = setup.start()["conversation"]["id"]
    assert share(setup, conversation_id, **body).status_code == 400
    assert setup.get(f"/v1/conversations/{conversation_id}/shares").json()["data"] == []
