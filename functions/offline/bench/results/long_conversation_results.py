"""The long-conversation phase's record: a conversation of many turns past its pool's context, through the gateway on
the real engine; whether every turn was answered, where the prompt's cut moved, and how much of each prompt the
prefix cache served."""

from __future__ import annotations

from pydantic import BaseModel


class LongTurn(BaseModel):
    turn: int
    prompt_tokens: int
    cached_tokens: int
    out_of_context: int  # stored messages the prompt left out
    error: str | None = None


class LongConversationStats(BaseModel):
    model: str
    context_tokens: int
    turns: list[LongTurn]

    @property
    def answered(self) -> int:
        return sum(1 for t in self.turns if t.error is None)

    @property
    def steps(self) -> list[int]:
        """The turns at which the prompt's cut moved forward."""
        return [
            b.turn for a, b in zip(self.turns, self.turns[1:], strict=False) if b.out_of_context != a.out_of_context
        ]

    @property
    def cached_ratio(self) -> float | None:
        """Cached over prompt tokens, every turn after the first."""
        later = [t for t in self.turns[1:] if t.error is None]
        prompt = sum(t.prompt_tokens for t in later)
        return sum(t.cached_tokens for t in later) / prompt if prompt else None

    @property
    def cached_ratio_between_steps(self) -> float | None:
        """The same over the turns where the cut did not move (what the prefix cache can serve)."""
        steps = set(self.steps)
        later = [t for t in self.turns[1:] if t.error is None and t.turn not in steps]
        prompt = sum(t.prompt_tokens for t in later)
        return sum(t.cached_tokens for t in later) / prompt if prompt else None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def long_conversation_lines(stats: LongConversationStats) -> list[str]:
    """bench.md's section: turns answered, the steps, the cached-prefix ratios, the largest prompt."""
    biggest = max((t.prompt_tokens for t in stats.turns), default=0)
    return [
        "",
        f"## Long conversation ({len(stats.turns)} turns through the gateway)",
        "",
        f"One stored conversation on `{stats.model}` (context {stats.context_tokens:,} tokens), one short question a "
        'turn; the gateway leaves the oldest turns out of the prompt in steps (docs/conversations.md, "Long '
        'conversations").',
        "",
        "| turns answered | cut moved at turns | largest prompt | cached / prompt tokens | same, between steps |",
        "|---|---|---|---|---|",
        f"| {stats.answered} of {len(stats.turns)} | {', '.join(map(str, stats.steps)) or 'never'} | "
        f"{biggest:,} | {_pct(stats.cached_ratio)} | {_pct(stats.cached_ratio_between_steps)} |",
    ]
