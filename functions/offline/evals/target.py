"""The deployment under evaluation, as the eval job sees it: a base URL and one eval-tenant key per tier."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import openai

from shared.fleet.tiers import Tier

if TYPE_CHECKING:
    from functions.judging.client import JudgeEndpoint

# Every eval request carries this header with the run id, so logs can tell eval traffic from customers'.
EVAL_RUN_HEADER = "x-fleetchat-eval-run"


class EvalTarget:
    """One running deployment, reached only through its public API with the eval tenants' keys."""

    def __init__(
        self,
        base_url: str,
        run_id: str,
        keys: dict[Tier, str],
        *,
        judge: JudgeEndpoint | None = None,
        local: bool = False,
        timeout_s: float = 600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.run_id = run_id
        self.keys = keys
        self.judge = judge
        self.local = local
        self.timeout_s = timeout_s
        self._clients: dict[Tier, openai.AsyncOpenAI] = {}
        self._http: dict[Tier, httpx.AsyncClient] = {}

    def _key(self, tier: Tier) -> str:
        try:
            return self.keys[tier]
        except KeyError:
            raise KeyError(f"no eval key for tier {tier.value!r}") from None

    def client(self, tier: Tier) -> openai.AsyncOpenAI:
        """An OpenAI SDK client with the tier's eval key and the eval tag header (no SDK retries: we measure)."""
        if tier not in self._clients:
            self._clients[tier] = openai.AsyncOpenAI(
                base_url=f"{self.base_url}/v1",
                api_key=self._key(tier),
                default_headers={EVAL_RUN_HEADER: self.run_id},
                max_retries=0,
                timeout=self.timeout_s,
            )
        return self._clients[tier]

    def http(self, tier: Tier) -> httpx.AsyncClient:
        """An httpx client with the same auth and tag, for non-OpenAI routes (/v1/conversations, /v1/usage)."""
        if tier not in self._http:
            self._http[tier] = httpx.AsyncClient(
                base_url=self.base_url,
                headers={"authorization": f"Bearer {self._key(tier)}", EVAL_RUN_HEADER: self.run_id},
                timeout=self.timeout_s,
            )
        return self._http[tier]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        for http in self._http.values():
            await http.aclose()
        self._clients.clear()
        self._http.clear()
