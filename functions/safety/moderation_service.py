"""`/v1/moderations` behind the router: validate the inputs, admit them (RPM/TPM, like a chat request), judge each with
the configured guard, and write one ledger entry of input tokens (a moderation generates none)."""

from __future__ import annotations

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.control.request_accounting import Accounting, TokenUsage
from functions.safety.classifier.token_table import TokenTable
from functions.safety.guard import Guard
from functions.safety.moderation_categories import OPENAI_CATEGORIES
from shared.storage.ledger import Outcome
from shared.wire.moderation_api import InputType, ModerationObject, ModerationRequest, ModerationResponse

LEDGER_MODEL_PREFIX = "moderation:"  # ledger entries of moderations read `moderation:<guard model>`
# Every score applies to text: no guard here reads images (image parts are refused before this).
TEXT_ONLY: dict[str, list[InputType]] = {name: ["text"] for name in OPENAI_CATEGORIES}


class ModerationService:
    def __init__(self, guard: Guard, accounting: Accounting, tokens: TokenTable) -> None:
        self.guard = guard
        self.accounting = accounting
        self.tokens = tokens  # the embedded classifier's tokenizer counts what is billed, whichever guard judges

    def count_tokens(self, texts: list[str]) -> int:
        return sum(int(ids.size) for ids in self.tokens.ids_batch(texts))

    async def moderate(self, caller: Caller, request: ModerationRequest) -> tuple[ModerationResponse, dict[str, str]]:
        """The response and its headers (request id, x-ratelimit-*). Bad input raises before anything is charged."""
        texts = request.texts()
        tokens = await to_thread.run_sync(self.count_tokens, texts)
        account = await self.accounting.open_input_only(caller, tokens, LEDGER_MODEL_PREFIX + self.guard.name)
        async with account.closed_if_raising():  # a guard that cannot answer: 503, nothing billed
            results = await self.guard.moderate(texts)
        await account.close(TokenUsage(tokens, 0), Outcome.COMPLETED)
        objects = [
            ModerationObject(
                flagged=r.flagged,
                categories=r.categories,
                category_scores=r.category_scores,
                category_applied_input_types=TEXT_ONLY,
            )
            for r in results
        ]
        return ModerationResponse(model=self.guard.name, results=objects), account.headers
