"""Synthetic multi-turn conversations for the coherence suite, generated from templates with a seed: a turn sets a
fact (a name, a number, a booking code) or a constraint ("no code", a persona's sign-off, an audience), and the turn
three later must use or honour it, with unrelated small asks around them (4-8 user turns in all).

Checks are programmatic where they can be (the fact appears; no code; the sign-off appears) and judged otherwise
(writing for the audience asked for). The same seed gives the same conversations."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

GAP = 3  # the checked turn comes this many user turns after the one that set the fact or constraint
MIN_TURNS, MAX_TURNS = 4, 8


class TurnCheck(BaseModel):
    kind: Literal["mentions", "no_code", "judge"]
    set_at: int  # the user turn (1-based) that set the fact or constraint
    needles: list[str] = Field(default_factory=list)  # mentions: any of these must appear
    expectation: str | None = None  # judge: what the answer must do (the judge's reference)


class Turn(BaseModel):
    user: str
    check: TurnCheck | None = None


class ConversationCase(BaseModel):
    id: str
    template: str
    turns: list[Turn] = Field(min_length=MIN_TURNS, max_length=MAX_TURNS)

    @property
    def checked_turn(self) -> int:
        return next(i for i, turn in enumerate(self.turns) if turn.check is not None)


FILLERS = (
    "Suggest a name for a houseplant.",
    "What's a quick stretch for a stiff neck?",
    "Give me one tip for remembering people's names.",
    "What's a good side dish for roast chicken?",
    "How long should I steep green tea?",
    "Recommend a board game for four people.",
    "In one sentence, what's the difference between weather and climate?",
    "Tell me a fun fact about octopuses.",
    "What should I pack for a rainy weekend away?",
    "How do I keep basil fresh for longer?",
    "Give me a short idea for a rainy-day activity with kids.",
    "What's a polite way to decline a meeting invitation?",
    "Why is the sky blue? Keep it brief.",
    "Suggest three names for a grey cat.",
    "What's one way to make a small room feel bigger?",
    "How many minutes should I boil an egg for a runny yolk?",
)
NAMES = ("Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Oluwaseun", "Mateo", "Ingrid", "Farah", "Declan")
EVENTS = ("a garden party", "a book club evening", "a hiking trip", "a birthday dinner", "a neighbourhood clean-up")
SPENDS = ("groceries", "my holiday", "a new bike", "the wedding flowers", "home repairs")
TASKS = (
    "reverse a list",
    "read a file line by line",
    "count the words in a string",
    "sort a dictionary by its values",
    "remove duplicates from a list",
)
PERSONAS = (
    ("a cheerful pirate captain", "Fair winds, matey!"),
    ("a calm village librarian", "Happy reading."),
    ("a medieval town herald", "Hear ye, hear ye!"),
    ("an enthusiastic sports commentator", "What a play!"),
)
AUDIENCES = (
    ("a seven-year-old", "short sentences and no jargon"),
    ("a busy executive", "three bullet points at most"),
    ("a poet", "a four-line rhyming verse"),
)
TOPICS = ("how rainbows form", "why we have seasons", "how vaccines work", "what a budget is", "how bees make honey")

Setter = Callable[[random.Random], tuple[str, str, TurnCheck]]  # (setting turn, checked turn, its check)


def _name(rng: random.Random) -> tuple[str, str, TurnCheck]:
    name, event = rng.choice(NAMES), rng.choice(EVENTS)
    return (
        f"Hi! My name is {name} and I'm organising {event}.",
        "Write a two-sentence invitation to my event, signed with my name.",
        TurnCheck(kind="mentions", set_at=0, needles=[name]),
    )


def _number(rng: random.Random) -> tuple[str, str, TurnCheck]:
    amount, spend = rng.randrange(120, 990), rng.choice(SPENDS)
    return (
        f"My budget for {spend} is {amount} euros. Please keep that in mind.",
        f"Remind me: what budget did I give you for {spend}? Reply with the amount.",
        TurnCheck(kind="mentions", set_at=0, needles=[str(amount)]),
    )


def _code(rng: random.Random) -> tuple[str, str, TurnCheck]:
    reference = "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(6))
    return (
        f"My booking reference is {reference}; I'll need it again later.",
        "What was my booking reference again?",
        TurnCheck(kind="mentions", set_at=0, needles=[reference]),
    )


def _no_code(rng: random.Random) -> tuple[str, str, TurnCheck]:
    return (
        "For the rest of this chat, please never include code or code blocks: explain in plain words only.",
        f"How do I {rng.choice(TASKS)} in Python?",
        TurnCheck(kind="no_code", set_at=0),
    )


def _persona(rng: random.Random) -> tuple[str, str, TurnCheck]:
    persona, signoff = rng.choice(PERSONAS)
    return (
        f"From now on, reply as {persona}, and end every answer with the words '{signoff}'",
        rng.choice(FILLERS),
        TurnCheck(kind="mentions", set_at=0, needles=[signoff.rstrip("!.")]),
    )


def _audience(rng: random.Random) -> tuple[str, str, TurnCheck]:
    audience, form = rng.choice(AUDIENCES)
    return (
        f"From now on, write every answer for {audience}: {form}.",
        f"Explain {rng.choice(TOPICS)}.",
        TurnCheck(
            kind="judge",
            set_at=0,
            expectation=f"Three turns earlier the user asked for every answer to be written for {audience}: {form}. "
            f"A good answer explains the topic correctly in exactly that form.",
        ),
    )


TEMPLATES: dict[str, Setter] = {
    "name": _name,
    "number": _number,
    "booking_code": _code,
    "no_code": _no_code,
    "persona_signoff": _persona,
    "audience": _audience,
}


def generate(count: int = 24, seed: int = 0) -> list[ConversationCase]:
    """`count` conversations cycling through the templates; deterministic for a seed."""
    rng = random.Random(seed)
    names = list(TEMPLATES)
    cases = []
    for number in range(count):
        template = names[number % len(names)]
        length = rng.randint(MIN_TURNS, MAX_TURNS)
        set_at = rng.randint(1, length - GAP)
        setting, checked, check = TEMPLATES[template](rng)
        fillers = rng.sample([f for f in FILLERS if f != checked], length)
        turns = []
        for position in range(1, length + 1):
            if position == set_at:
                turns.append(Turn(user=setting))
            elif position == set_at + GAP:
                turns.append(Turn(user=checked, check=check.model_copy(update={"set_at": set_at})))
            else:
                turns.append(Turn(user=fillers[position - 1]))
        cases.append(ConversationCase(id=f"mt-{seed}-{number:03d}-{template}", template=template, turns=turns))
    return cases
