"""Benchmark prompts: varied short generation prompts and a long, run-unique shared system prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

TOPICS = (
    "a lighthouse keeper who finds a message in a bottle",
    "the history of the printing press",
    "how bees communicate with each other",
    "a robot learning to paint",
    "the water cycle, explained for children",
    "a trip across the Sahara on a camel",
    "why the sky is blue",
    "a chess game between two old friends",
    "how bread rises",
    "a city built on the back of a giant turtle",
    "the life of a river from source to sea",
    "a detective who can talk to cats",
)

STYLES = ("Write a long, detailed story about", "Explain in several paragraphs", "Describe at length")

# A neutral, policy-like paragraph; repeated (numbered) to make a long system prompt of a predictable size.
_POLICY_SENTENCES = (
    "You are a careful and friendly assistant for a travel company.",
    "Answer questions about bookings, luggage, refunds and destinations clearly and politely.",
    "When you are not sure about a fact, say so and suggest where the customer could check it.",
    "Never invent prices, flight numbers or booking references.",
    "Keep answers short unless the customer asks for details, and use plain language.",
    "If a request is outside travel topics, kindly steer the conversation back to travel.",
)

QUESTIONS = (
    "Can I bring a folding bicycle on a train in Italy?",
    "What should I pack for a week in Iceland in March?",
    "How early should I arrive at the airport for an international flight?",
    "Is travel insurance worth it for a weekend city break?",
    "What is a good way to avoid jet lag after a long flight east?",
    "Can I change the name on a non-refundable ticket?",
    "Which documents do I need to rent a car abroad?",
    "How do I request a vegetarian meal on a flight?",
)


def generation_messages(index: int, tag: str = "") -> list[ChatCompletionMessageParam]:
    """A short user prompt asking for a long answer; `index` varies topic and style, `tag` makes it unique."""
    topic = TOPICS[index % len(TOPICS)]
    style = STYLES[(index // len(TOPICS)) % len(STYLES)]
    prefix = f"[{tag}] " if tag else ""
    return [{"role": "user", "content": f"{prefix}{style} {topic}."}]


def long_system_prompt(nonce: str, approx_words: int = 640) -> str:
    """A ~1,000-token system prompt (about 1.6 SmolLM2 tokens per word) that starts with `nonce`.

    The nonce comes first so that no block of this prompt can already be in any prefix cache: the first request
    that carries it is truly cold.
    """
    parts = [f"Session {nonce}. Travel desk handbook, read it before every answer."]
    words = len(parts[0].split())
    section = 1
    while words < approx_words:
        for sentence in _POLICY_SENTENCES:
            line = f"Rule {section}.{_POLICY_SENTENCES.index(sentence) + 1}: {sentence}"
            parts.append(line)
            words += len(line.split())
        section += 1
    return "\n".join(parts)


def prefix_messages(system_prompt: str, index: int) -> list[ChatCompletionMessageParam]:
    """The shared system prompt plus a different user question per index."""
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]},
    ]
