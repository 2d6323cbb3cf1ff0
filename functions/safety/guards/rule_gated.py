"""`RuleGatedGuard`: the pre-filter's rule layer in front of a remote guard that judges alone (Llama Guard with no
band, any `/v1/moderations` endpoint).

The deny list (`rules.py`; obfuscation undone first) costs well under a millisecond and blocks what a guard model may
not name: Llama Guard 3's hazards S1-S14 have no jailbreak category. A deny hit is decided here, without a round trip;
everything else is the remote guard's. In band mode the embedded guard already runs the rules, so it is not gated
again."""

from __future__ import annotations

from collections.abc import Sequence

from anyio import to_thread

from functions.safety.findings import SafetyFinding
from functions.safety.guard import Guard, ModerationResult
from functions.safety.guards.embedded import EmbeddedGuard, moderation_result
from functions.safety.prefilter import Assessment
from functions.safety.rules import RULES_VERSION
from shared.wire.schemas import ChatMessage


class RuleGatedGuard:
    def __init__(self, remote: Guard, embedded: EmbeddedGuard) -> None:
        self.remote = remote
        self.embedded = embedded

    @property
    def name(self) -> str:
        return self.remote.name

    @property
    def policy_version(self) -> str:
        return f"{RULES_VERSION}+{self.remote.policy_version}"

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        denied = await to_thread.run_sync(self.embedded.prefilter.deny, messages)
        return denied if denied is not None else await self.remote.check(messages)

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        """Inputs a deny rule flags are answered here (their category at 1.0); the rest go to the remote guard in one
        call, and the results come back in the order of `inputs`."""
        deny = self.embedded.prefilter.deny
        denied = await to_thread.run_sync(lambda: [deny([ChatMessage(role="user", content=text)]) for text in inputs])
        remote_inputs = [text for text, finding in zip(inputs, denied, strict=True) if finding is None]
        remote_results = iter(await self.remote.moderate(remote_inputs) if remote_inputs else [])
        labels = self.embedded.labels
        return [
            next(remote_results) if finding is None else moderation_result(Assessment(finding, None), labels)
            for finding in denied
        ]
