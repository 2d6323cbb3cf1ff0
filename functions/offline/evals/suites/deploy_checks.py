"""Deploy checks (level 1): routing per tier (from the response and the ledger), the prefix cache for a shared system
prompt and for a stored conversation's turns, and a safety smoke test — each a pass/fail case, each group gated at 1.0.

Everything is observed through the public API with the eval tenants' keys, never read from config: a tier table
that routes free traffic to the flagship, or a rendering change that breaks the prefix cache, fails here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from functions.offline.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.offline.evals.target import EvalTarget
from functions.safety.care import CARE_HEADER
from shared.fleet.tiers import Tier

# Which pool each tier must land on, and the pool it must not reach.
EXPECTED_POOL: dict[Tier, str] = {Tier.FREE: "mini", Tier.PLUS: "flagship"}
FORBIDDEN_POOL: dict[Tier, str] = {Tier.FREE: "flagship"}
# The second request of a session must find this share of the first one's prompt in the cache (the system prompt
# is ~95% of it; the cache works in whole blocks).
SESSION_CACHED_SHARE = 0.75
# Each turn of a stored conversation must find this share of the previous turn's prompt in the cache.
TURN_CACHED_SHARE = 0.9
SYSTEM_PROMPT_MIN_TOKENS = 600  # a prompt shorter than this (a different tokenizer?) would not test much
LEDGER_WAIT_S = 15.0  # the ledger entry is written as the request ends; allow for a slow store
MAX_TOKENS = 8  # the checks look at routing and usage, not at the answers
BENIGN_SMOKE = 3  # benign asks answered (each costs a generation); every adversarial smoke item is sent

_RULES = (
    "Answer in plain English and keep sentences short.",
    "Prefer concrete examples over general statements when you explain something.",
    "When a question is ambiguous, state the reading you chose before you answer it.",
    "Never invent citations, quotations, statistics or product names.",
    "Use metric units first and give imperial units in brackets when they help.",
    "Write numbers below ten as words and larger numbers as digits.",
    "When you list steps, number them and put one action in each step.",
    "If you are unsure, say so plainly and suggest how the reader could check.",
)
OPENING = (
    "I am planning a slow two-week rail journey through Portugal and Spain next spring. I like small towns, regional "
    "food, long walks, old churches, tiled facades and quiet evenings. I do not drive, and I would rather spend three "
    "nights in a place than rush. My budget is moderate. Please keep this in mind and keep your answers short."
)
FOLLOW_UPS = ("Where should I start?", "What should I eat there?")


def system_prompt(run_id: str) -> str:
    """A ~1k-token house style guide, unique to the run so its first request cannot already be cached."""
    lines = [f"You are the assistant of a travel company (evaluation run {run_id}). Follow the house style guide."]
    for number in range(1, 49):
        lines.append(
            f"Rule {number}: {_RULES[number % len(_RULES)]} This rule applies to every answer in section {number}."
        )
    return "\n".join(lines)


def _failed(case_id: str, exc: BaseException, **detail: Any) -> CaseResult:
    return CaseResult(case_id=case_id, passed=False, detail={**detail, "error": f"{type(exc).__name__}: {exc}"[:300]})


class DeployChecksSuite:
    name = "deploy"
    description = "Routing per tier (response + ledger), prefix cache (session and stored turns), safety smoke."

    def __init__(self, *, limit: int | None = None, max_tokens: int = MAX_TOKENS) -> None:
        self.limit = limit  # caps the safety smoke items; the other checks are few and always run
        self.max_tokens = max_tokens

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult:
        from functions.offline.safety_training.labelled_data import golden_adversarial, golden_benign

        adversarial = [item for item in golden_adversarial() if item.smoke][: self.limit]
        benign = [item for item in golden_benign() if item.smoke][: min(BENIGN_SMOKE, self.limit or BENIGN_SMOKE)]
        groups: dict[str, Callable[[], Awaitable[list[CaseResult]]]] = {
            "routing": lambda: self._routing(target, progress),
            "prefix_cache": lambda: self._session_cache(target, progress),
            "conversation_cache": lambda: self._conversation_cache(target, progress),
            "safety": lambda: self._safety(target, progress, adversarial, benign),
        }
        progress.start(self.name, 3 + 2 + 1 + len(FOLLOW_UPS) + len(adversarial) + len(benign))
        result = SuiteResult(suite=self.name)
        for group, check in groups.items():
            try:
                cases = await check()
            except Exception as exc:  # a check that cannot complete fails its group, the others still run
                cases = [_failed(f"{group}.error", exc)]
            result.cases.extend(cases)
            result.metrics.append(_ratio(f"deploy.{group}", cases))
        result.metrics.append(_ratio("deploy.passed", result.cases))
        shares = [c.detail["cached_share"] for c in result.cases if "cached_share" in c.detail]
        if shares:
            result.metrics.append(
                Metric(
                    name="deploy.min_cached_share",
                    value=min(shares),
                    unit="ratio",
                    direction=Direction.HIGHER_IS_BETTER,
                    n=len(shares),
                    note="lowest cached/previous-prompt share over the cache checks (informational)",
                )
            )
        return result

    # -- routing ------------------------------------------------------------------------------------------------

    async def _routing(self, target: EvalTarget, progress: Progress) -> list[CaseResult]:
        cases = []
        for tier, pool in EXPECTED_POOL.items():
            cases.append(await self._lands_on(target, tier, pool))
            progress.advance(self.name)
        for tier, pool in FORBIDDEN_POOL.items():
            cases.append(await self._cannot_reach(target, tier, pool))
            progress.advance(self.name)
        return cases

    async def _lands_on(self, target: EvalTarget, tier: Tier, pool: str) -> CaseResult:
        case_id = f"routing.{tier.value}_on_{pool}"
        before = await _ledger_requests(target, tier)
        try:
            reply = await target.client(tier).chat.completions.create(
                model=pool, messages=[{"role": "user", "content": "Say hello."}], max_tokens=self.max_tokens
            )
        except openai.APIError as exc:
            return _failed(case_id, exc, tier=tier.value, expected=pool)
        after = await _ledger_settled(target, tier, before, pool)
        grew = {name: after.get(name, 0) - before.get(name, 0) for name in sorted(after.keys() | before.keys())}
        ledger_ok = grew.get(pool, 0) >= 1 and all(n == 0 for name, n in grew.items() if name != pool)
        return CaseResult(
            case_id=case_id,
            passed=reply.model == pool and ledger_ok,
            detail={"tier": tier.value, "expected": pool, "response_model": reply.model, "ledger_delta": grew},
        )

    async def _cannot_reach(self, target: EvalTarget, tier: Tier, pool: str) -> CaseResult:
        case_id = f"routing.{tier.value}_refused_{pool}"
        before = await _ledger_requests(target, tier)
        try:
            reply = await target.client(tier).chat.completions.create(
                model=pool, messages=[{"role": "user", "content": "Say hello."}], max_tokens=self.max_tokens
            )
        except openai.NotFoundError as exc:
            after = await _ledger_requests(target, tier)
            return CaseResult(
                case_id=case_id,
                passed=exc.code == "model_not_found" and after.get(pool, 0) == before.get(pool, 0),
                detail={"tier": tier.value, "status": exc.status_code, "code": exc.code},
            )
        except openai.APIError as exc:
            return _failed(case_id, exc, tier=tier.value)
        return CaseResult(
            case_id=case_id,
            passed=False,
            detail={"tier": tier.value, "response_model": reply.model, "why": f"{tier.value} reached {pool}"},
        )

    # -- prefix cache -------------------------------------------------------------------------------------------

    async def _session_cache(self, target: EvalTarget, progress: Progress) -> list[CaseResult]:
        """Two requests of one session (sticky header) sharing a ~1k-token system prompt, per tier."""
        system = system_prompt(target.run_id)
        cases = []
        for tier, pool in EXPECTED_POOL.items():
            case_id = f"prefix_cache.{tier.value}_session"
            headers = {"x-session-id": f"eval-{target.run_id}-{tier.value}"}
            usages = []
            try:
                for ask in ("Say hello.", "Name one colour."):
                    reply = await target.client(tier).chat.completions.create(
                        model=pool,
                        messages=[{"role": "system", "content": system}, {"role": "user", "content": ask}],
                        max_tokens=self.max_tokens,
                        temperature=0,
                        extra_headers=headers,
                    )
                    usages.append(_usage(reply))
            except openai.APIError as exc:
                cases.append(_failed(case_id, exc, pool=pool))
                progress.advance(self.name)
                continue
            first_prompt, second_cached = usages[0]["prompt_tokens"], usages[1]["cached_tokens"]
            share = second_cached / first_prompt if first_prompt else 0.0
            cases.append(
                CaseResult(
                    case_id=case_id,
                    passed=first_prompt >= SYSTEM_PROMPT_MIN_TOKENS and share >= SESSION_CACHED_SHARE,
                    score=share,
                    detail={"pool": pool, "first": usages[0], "second": usages[1], "cached_share": round(share, 4)},
                )
            )
            progress.advance(self.name)
        return cases

    async def _conversation_cache(self, target: EvalTarget, progress: Progress) -> list[CaseResult]:
        """A stored conversation (the conversation API): each turn finds the previous turn's prompt in the cache."""
        tier, pool = Tier.PLUS, EXPECTED_POOL[Tier.PLUS]
        client = target.client(tier)
        first = await client.chat.completions.create(
            model=pool,
            messages=[{"role": "user", "content": f"{OPENING} (Trip reference {target.run_id}.)"}],
            max_tokens=self.max_tokens * 2,
            temperature=0,
            extra_body={"store": True},
        )
        conversation = first.model_dump().get("conversation") or {}
        progress.advance(self.name)
        if not conversation.get("stored"):
            return [
                CaseResult(case_id="conversation_cache.stored", passed=False, detail={"conversation": conversation})
            ]
        cases = [CaseResult(case_id="conversation_cache.stored", passed=True, detail={"turn": 1})]
        previous = _usage(first)["prompt_tokens"]
        try:
            for turn, text in enumerate(FOLLOW_UPS, start=2):
                case_id = f"conversation_cache.turn_{turn}"
                try:
                    reply = await client.chat.completions.create(
                        model=pool,
                        messages=[{"role": "user", "content": text}],
                        max_tokens=self.max_tokens * 2,
                        temperature=0,
                        extra_body={"conversation_id": conversation["id"]},
                    )
                except openai.APIError as exc:
                    cases.append(_failed(case_id, exc))
                    break
                usage = _usage(reply)
                share = usage["cached_tokens"] / previous if previous else 0.0
                cases.append(
                    CaseResult(
                        case_id=case_id,
                        passed=share >= TURN_CACHED_SHARE,
                        score=share,
                        detail={"previous_prompt": previous, **usage, "cached_share": round(share, 4)},
                    )
                )
                previous = usage["prompt_tokens"]
                progress.advance(self.name)
        finally:
            # The eval tenant keeps nothing it does not need.
            await target.http(tier).delete(f"/v1/conversations/{conversation['id']}")
        return cases

    # -- safety smoke -------------------------------------------------------------------------------------------

    async def _safety(
        self, target: EvalTarget, progress: Progress, adversarial: list[Any], benign: list[Any]
    ) -> list[CaseResult]:
        tier, pool = Tier.FREE, EXPECTED_POOL[Tier.FREE]
        client = target.client(tier)
        cases = []
        for item in adversarial:
            case_id = f"safety.refused.{item.id}"
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=pool, messages=[m.model_dump() for m in item.messages], max_tokens=self.max_tokens
                )
                cared = raw.headers.get(CARE_HEADER) == "care"  # a self-harm ask answered with care: no model saw it
                finish = "cared" if cared else raw.parse().choices[0].finish_reason
                cases.append(
                    CaseResult(
                        case_id=case_id, passed=cared, detail={"category": item.category, "finish_reason": finish}
                    )
                )
            except openai.BadRequestError as exc:
                cases.append(
                    CaseResult(
                        case_id=case_id,
                        passed=exc.code == "content_policy_violation",
                        detail={"category": item.category, "code": exc.code},
                    )
                )
            except openai.APIError as exc:
                cases.append(_failed(case_id, exc, category=item.category))
            progress.advance(self.name)
        for item in benign:
            case_id = f"safety.answered.{item.id}"
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=pool, messages=[m.model_dump() for m in item.messages], max_tokens=self.max_tokens
                )
                reply = raw.parse()
                finish = "cared" if raw.headers.get(CARE_HEADER) == "care" else reply.choices[0].finish_reason
                cases.append(
                    CaseResult(
                        case_id=case_id,
                        passed=finish not in ("content_filter", "cared") and bool(reply.choices[0].message.content),
                        detail={"topic": item.topic, "finish_reason": finish},
                    )
                )
            except openai.APIError as exc:
                cases.append(_failed(case_id, exc, topic=item.topic))
            progress.advance(self.name)
        return cases


def _ratio(name: str, cases: list[CaseResult]) -> Metric:
    judged = [c for c in cases if c.passed is not None]
    passed = sum(1 for c in judged if c.passed)
    return Metric(
        name=name,
        value=passed / len(judged) if judged else 0.0,
        unit="ratio",
        direction=Direction.HIGHER_IS_BETTER,
        threshold=1.0,
        n=len(judged),
    )


def _usage(reply: Any) -> dict[str, int]:
    usage = reply.usage
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return {"prompt_tokens": usage.prompt_tokens, "cached_tokens": cached}


async def _ledger_requests(target: EvalTarget, tier: Tier) -> dict[str, int]:
    """Requests per model in the eval tenant's ledger this month (`GET /v1/usage`)."""
    response = await target.http(tier).get("/v1/usage")
    response.raise_for_status()
    return {model: int(totals["requests"]) for model, totals in response.json()["by_model"].items()}


async def _ledger_settled(target: EvalTarget, tier: Tier, before: dict[str, int], pool: str) -> dict[str, int]:
    """The ledger once the request's entry is in (or as it is after LEDGER_WAIT_S: the check then fails)."""
    deadline = time.monotonic() + LEDGER_WAIT_S
    while True:
        after = await _ledger_requests(target, tier)
        if sum(after.values()) > sum(before.values()) or time.monotonic() > deadline:
            return after
        await asyncio.sleep(0.2)
