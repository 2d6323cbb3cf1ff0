"""Llama Guard 3's side of the wire: the conversation as it reads it, its verdict's format, and its hazard codes in
our categories and OpenAI's.

Format (Meta's Llama Guard 3 model card and prompt-format page, as mirrored by Ollama's `llama-guard3` library page:
`>>> Tell me how to go to the zoo and steal a llama.` answers `unsafe` / `S2`; its template instructs "First line must
read 'safe' or 'unsafe'. If unsafe, a second line must include a comma-separated list of violated categories"): the
first line is `safe` or `unsafe`; when unsafe, the second line lists hazard codes `S1`..`S14` of the MLCommons taxonomy
(S13 elections and S14 code interpreter abuse are Meta's additions). The chat template, which vLLM applies, wraps the
conversation in that task prompt itself, so the client sends the plain conversation. The template only knows the roles
user and assistant, alternating, user first (`guard_messages` folds ours into that shape); the 1B model card passes
content as a list of `{"type": "text"}` parts, which vLLM accepts for any template.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.wire.schemas import ChatMessage

UNSPECIFIED = "unspecified"  # an unsafe verdict without a code we know


@dataclass(frozen=True)
class Hazard:
    code: str
    name: str
    category: str  # what our findings and audit records call it (an OpenAI name where one fits)
    openai: frozenset[str]  # the OpenAI moderation categories it flags (empty: none fits)


def _hazard(code: str, name: str, category: str, *openai: str) -> Hazard:
    return Hazard(code, name, category, frozenset(openai))


HAZARDS: dict[str, Hazard] = {
    h.code: h
    for h in (
        _hazard("S1", "Violent Crimes", "violence", "violence", "illicit/violent", "illicit"),
        _hazard("S2", "Non-Violent Crimes", "illicit", "illicit"),
        _hazard("S3", "Sex-Related Crimes", "sexual", "sexual", "illicit"),
        _hazard("S4", "Child Sexual Exploitation", "sexual/minors", "sexual/minors", "sexual"),
        # Defamation harms a named person with false claims: closest to harassment among OpenAI's categories.
        _hazard("S5", "Defamation", "harassment", "harassment"),
        _hazard("S6", "Specialized Advice", "specialized-advice"),
        _hazard("S7", "Privacy", "privacy"),
        _hazard("S8", "Intellectual Property", "intellectual-property"),
        _hazard("S9", "Indiscriminate Weapons", "illicit/violent", "illicit/violent", "illicit"),
        _hazard("S10", "Hate", "hate", "hate"),
        _hazard("S11", "Suicide & Self-Harm", "self-harm", "self-harm"),
        _hazard("S12", "Sexual Content", "sexual", "sexual"),
        _hazard("S13", "Elections", "elections"),
        _hazard("S14", "Code Interpreter Abuse", "code-interpreter-abuse"),
    )
}
# A hazard code as the model writes it (`S1`..`S14`, any case); beyond S14 is a code we do not know, still unsafe.
_CODE = re.compile(r"S(\d{1,2})", re.IGNORECASE)
_WORD = re.compile(r"[^\s,;:.*`'\"]+")  # words, without the punctuation and markdown a model may wrap them in


class MalformedVerdictError(ValueError):
    """The guard answered something that is not Llama Guard's verdict format."""


@dataclass(frozen=True)
class LlamaGuardVerdict:
    safe: bool
    codes: tuple[str, ...] = ()  # as the model listed them, normalised (`s06` -> `S6`; unknown codes kept)

    @property
    def hazards(self) -> list[Hazard]:
        return [HAZARDS[code] for code in self.codes if code in HAZARDS]

    @property
    def category(self) -> str:
        """The first listed hazard's category: what a refusal names."""
        known = self.hazards
        return known[0].category if known else UNSPECIFIED

    @property
    def openai_flags(self) -> set[str]:
        return {name for hazard in self.hazards for name in hazard.openai}

    def ignoring(self, ignored: frozenset[str]) -> LlamaGuardVerdict:
        """The verdict under a deployment's ignored codes: unsafe only for a code it does not ignore. An `unsafe`
        that names no code at all stays unsafe (nothing says it was only an ignored hazard)."""
        if self.safe or not ignored or not self.codes:
            return self
        kept = tuple(code for code in self.codes if code not in ignored)
        return LlamaGuardVerdict(safe=not kept, codes=kept)


def _codes(words: list[str]) -> list[str]:
    return [f"S{int(match[1])}" for word in words if (match := _CODE.fullmatch(word))]


def parse_verdict(text: str) -> LlamaGuardVerdict:
    """`safe`, or `unsafe` and its hazard codes (`S1,S10`), read leniently where leniency cannot turn a block into a
    pass: case, surrounding whitespace and punctuation, codes on the first line (`unsafe S1`) or the second.

    The first line decides. `safe` must stand alone on it. After `unsafe` the words of the first line must be codes;
    on the second line words that are not codes (a code cut off by the token limit, `S1,S`) are passed over, and an
    `unsafe` with no code at all is still unsafe (category "unspecified"): the model said unsafe, and reading that
    as a failure would hand the request to the fail policy, which may let it through. Anything else is malformed."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise MalformedVerdictError("empty guard output")
    head, *rest = _WORD.findall(lines[0].lower()) or [""]
    if head == "safe" and not rest:
        return LlamaGuardVerdict(safe=True)
    if head != "unsafe" or not all(_CODE.fullmatch(word) for word in rest):
        raise MalformedVerdictError(f"first line is neither 'safe' nor 'unsafe' [codes]: {lines[0][:40]!r}")
    second = _WORD.findall(lines[1]) if len(lines) > 1 else []
    return LlamaGuardVerdict(safe=False, codes=tuple(dict.fromkeys(_codes(rest) + _codes(second))))


def guard_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Our conversation as Llama Guard's template takes it: system turns read as the user's (they are instructions
    the user sent), tool turns as the assistant's; consecutive turns of one role joined; anything before the first
    user turn dropped (the template insists on user first)."""
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = "assistant" if message.role in ("assistant", "tool") else "user"
        text = message.text()
        if not text.strip() or (not turns and role == "assistant"):
            continue
        if turns and turns[-1][0] == role:
            turns[-1] = (role, f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append((role, text))
    return [{"role": role, "content": [{"type": "text", "text": text}]} for role, text in turns]
