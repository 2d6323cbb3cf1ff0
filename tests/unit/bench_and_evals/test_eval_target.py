"""EvalTarget: every eval request carries the run's tag header and the tier's eval key, through both clients."""

from __future__ import annotations

from fastapi import FastAPI, Request

from functions.offline.evals.target import EVAL_RUN_HEADER, EvalTarget
from shared.fleet.tiers import Tier
from tests.support.servers import serve


def recorder() -> FastAPI:
    app = FastAPI()
    app.state.seen = []

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        app.state.seen.append(dict(request.headers))
        return {"object": "list", "data": [{"id": "mini", "object": "model", "created": 0, "owned_by": "x"}]}

    return app


async def test_both_clients_send_the_tag_and_the_tiers_key() -> None:
    app = recorder()
    with serve(app) as url:
        target = EvalTarget(f"{url}/v1", "run-42", {Tier.FREE: "sk-free", Tier.PLUS: "sk-plus"})
        assert target.base_url == url
        models = await target.client(Tier.FREE).models.list()
        assert [m.id for m in models.data] == ["mini"]
        assert (await target.http(Tier.PLUS).get("/v1/models")).status_code == 200
        await target.aclose()
    first, second = app.state.seen
    assert (first[EVAL_RUN_HEADER], first["authorization"]) == ("run-42", "Bearer sk-free")
    assert (second[EVAL_RUN_HEADER], second["authorization"]) == ("run-42", "Bearer sk-plus")
