"""Which server tools a request asked for: the extension field read from the request's extra fields, refused with a
400 that names the `param`; the python tool is refused, never run unisolated, where its sandbox runner cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from functions.chat.server_tools.metrics import ServerToolMetrics
from functions.chat.server_tools.service import ServerTools, server_tools_for
from functions.sandbox.bubblewrap import bwrap_works
from shared.errors import InvalidRequestError, PermissionDeniedError
from shared.fleet.tables import install_tables, tables
from shared.fleet.tiers import Tier
from shared.server_tool_settings import ServerToolSettings
from shared.storage.sqlite.limits import SQLiteRateLimits
from shared.storage.sqlite.tool_audit import SQLiteToolAudit
from shared.wire.schemas import ChatCompletionRequest


def _service(tmp_path: Path) -> ServerTools:
    db = tmp_path / "fleetchat.db"
    metrics = ServerToolMetrics(CollectorRegistry())
    return server_tools_for(ServerToolSettings(), tmp_path, SQLiteRateLimits(db), SQLiteToolAudit(db), metrics, str)


def _request(**extra: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "mini", "messages": [{"role": "user", "content": "hi"}],
                                                 **extra})  # fmt: skip


def test_names_are_read_in_order_once_and_an_empty_list_is_none(tmp_path: Path) -> None:
    service = _service(tmp_path)
    assert service.requested(_request()) is None and service.requested(_request(server_tools=[])) is None
    assert service.requested(_request(server_tools=["calculator", "calculator"])) == ["calculator"]


def test_without_bubblewrap_python_is_a_400_and_the_calculator_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap to be found
    bwrap_works.cache_clear()
    try:
        service = _service(tmp_path)
        with pytest.raises(InvalidRequestError) as refused:
            service.requested(_request(server_tools=["calculator", "python"]))
        assert (refused.value.code, refused.value.param) == ("server_tool_unavailable", "server_tools[1]")
        assert "bubblewrap" in refused.value.message
        assert service.requested(_request(server_tools=["calculator"])) == ["calculator"]
    finally:
        bwrap_works.cache_clear()


def test_the_modal_runner_without_the_modal_app_is_a_400_naming_why(tmp_path: Path) -> None:
    db = tmp_path / "fleetchat.db"
    settings = ServerToolSettings.model_validate({"sandbox": {"runner": "modal"}})
    metrics = ServerToolMetrics(CollectorRegistry())
    service = server_tools_for(settings, tmp_path, SQLiteRateLimits(db), SQLiteToolAudit(db), metrics, str)
    with pytest.raises(InvalidRequestError) as refused:
        service.requested(_request(server_tools=["python"]))
    assert refused.value.code == "server_tool_unavailable" and "Modal" in refused.value.message


def test_a_tier_offers_only_its_own_tools_and_a_reload_can_change_them(tmp_path: Path) -> None:
    service = _service(tmp_path)
    with pytest.raises(PermissionDeniedError) as refused:
        service.requested(_request(server_tools=["calculator", "python"]), Tier.FREE)
    assert (refused.value.code, refused.value.param) == ("server_tool_not_in_tier", "server_tools[1]")
    assert service.requested(_request(server_tools=["calculator"]), Tier.FREE) == ["calculator"]
    assert service.offered(Tier.FREE) == ["calculator"]
    live = tables()
    plus = live.tiers[Tier.PLUS].model_copy(update={"server_tools": ("calculator",)})
    install_tables(live.replaced(tiers={**live.tiers, Tier.PLUS: plus}))  # an operator's edit, hot-reloaded
    try:
        assert service.offered(Tier.PLUS) == ["calculator"]
        with pytest.raises(PermissionDeniedError):
            service.requested(_request(server_tools=["python"]), Tier.PLUS)
    finally:
        install_tables(live)
    assert "python" in service.offered(Tier.PLUS) or not bwrap_works()
