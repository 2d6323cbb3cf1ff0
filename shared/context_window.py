"""Which stored messages a long conversation's prompt keeps: the oldest turns leave in steps, so consecutive turns
still share their prompt's prefix (the workers' prefix cache) and a conversation never outgrows its pool's context.

The window is a pure function of the conversation's messages and the pool's context length, replayed from the first
message on every turn: walking the messages in order, whenever the kept ones (after the pinned system prompt) would
pass `budget` tokens, the start jumps forward to the first user message after which at most `keep` tokens remain.
Replaying from the start makes the cut depend only on the history, never on which gateway computes it or when; and
since appending messages never changes an earlier decision, the cut stays put between jumps, so every turn between
two jumps renders the previous turn's prompt as its prefix. A jump costs one cold prompt, then the cache warms again.

Tokens are estimated the way admission reserves them (about 3 bytes a token plus the chat template's overhead per
message), which overcounts English prose; `budget` leaves the rest of the context for the answer and the estimate's
error. A worker that still finds the prompt too long answers 400 `context_length_exceeded`, as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from shared.storage.conversations import StoredMessage

# The gateway's one token estimate (admission's reservation uses it too): about 3 bytes a token, plus the chat
# template's tokens around each message (role markers), generously.
BYTES_PER_TOKEN = 3
MESSAGE_OVERHEAD_TOKENS = 8
# An image's prompt tokens, at most, as a vision model's processor makes them: Qwen2.5-VL's default (at most 1,280
# patches of 28 x 28 pixels, one token each) is the deployed pool's (shared/fleet/builtin.yaml).
IMAGE_TOKENS = 1280
BUDGET_SHARE = 0.75  # of the context: the kept messages' most; the rest is the answer's and the estimate's margin
KEEP_SHARE = 0.4  # of the context: what a jump leaves, so the next jump is many turns away


def text_tokens(text: str) -> int:
    """The estimated tokens of `text` alone (no message around it)."""
    return len(text.encode()) // BYTES_PER_TOKEN


def message_tokens(message: StoredMessage) -> int:
    text = message.content + (json.dumps([c.model_dump() for c in message.tool_calls]) if message.tool_calls else "")
    images = sum(part.type == "image_url" for part in message.content_parts or ())
    return text_tokens(text) + images * IMAGE_TOKENS + MESSAGE_OVERHEAD_TOKENS


@dataclass(frozen=True)
class ContextWindow:
    budget: int  # estimated tokens the kept messages (pinned ones included) may take
    keep: int  # estimated tokens a jump leaves

    @classmethod
    def for_context(cls, context_tokens: int) -> ContextWindow:
        return cls(budget=int(context_tokens * BUDGET_SHARE), keep=int(context_tokens * KEEP_SHARE))


def pinned_count(messages: Sequence[StoredMessage]) -> int:
    """The leading system (or developer) messages: always kept."""
    count = 0
    while count < len(messages) and messages[count].role in ("system", "developer"):
        count += 1
    return count


def window_start(messages: Sequence[StoredMessage], window: ContextWindow) -> int:
    """The index of the first message after the pinned ones that the prompt for `messages` keeps (== the pinned count
    when nothing is left out). A cut falls only on a user message, so a tool call is never parted from its result."""
    pinned = pinned_count(messages)
    costs = [message_tokens(m) for m in messages]
    fixed = sum(costs[:pinned])
    start, kept = pinned, 0
    for index in range(pinned, len(messages)):
        kept += costs[index]
        if fixed + kept <= window.budget:
            continue
        # Past the budget: jump to the first user message after which at most `keep` remains (at worst, the last
        # user message up to here: the newest turn is always kept whole).
        candidate, remaining = start, kept
        last_user = start
        for cut in range(start, index + 1):
            if messages[cut].role == "user":
                last_user = cut
                if cut > start and fixed + remaining <= window.keep:
                    candidate = cut
                    break
            remaining -= costs[cut]
        else:
            candidate = last_user
        kept -= sum(costs[start:candidate])
        start = candidate
    return start
