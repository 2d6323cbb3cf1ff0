"""Self-harm asks answered with care: which asks get the fixed supportive reply instead of a refusal, and the reply.

A person who says they are thinking of hurting or killing themselves gets a fixed reply in the chat (crisis lines
for their locale, the first steps crisis services ask people to take), streamed as a normal assistant message and
audited as a safety event (`cared`); never a 400. An ask for a *way* to do it (the `self-harm-method` deny rule, or a
self-harm finding whose text asks for a method) stays refused, with where to find help in the error message.

The reply is fixed text, not generated: a small model must not improvise in a crisis (the seeds' and the field's
practice: crisis services' safe-messaging guidance, e.g. 988 Lifeline's and Samaritans' media guidelines, asks for a
direct, non-judgemental reply that points to help now). Its version (`CARE_VERSION`) is stored with the answer as
its model version, so the web chat shows it as the service's message, not the model's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from functions.safety.categories import Category
from functions.safety.findings import SafetyFinding
from functions.safety.rules import neutralise_idioms
from shared.wire.schemas import ChatMessage

CARE_VERSION = "fleetchat-care@1"  # the stored answer's model version: the web chat labels the reply by it
CARE_HEADER = "x-fleetchat-safety"  # "care" on a response that is the supportive reply

_I = r"(?:i|i'm|im|i\s+am|i've|ive|i\s+have|i'll|ill|i\s+will|i'd|id|i\s+would|me|my|myself)"
# First-person thoughts of suicide or self-harm, said or asked about (not a method: see METHOD).
_NOT_MEANT = (  # hyperbole: "I'd kill myself laughing", "I'm going to die of boredom"
    r"(?!\s+(?:laughing|doing|trying|working|running|getting|over|for|of|from|on|happy|old|before|without|someday|"
    r"eventually|one\s+day|in\s+(?:peace|my\s+sleep|minecraft|the\s+game))\b)"
)
_DISCLOSURE = re.compile(
    # ... in words that are first-person themselves
    r"\b(?:kill(?:ing)?\s+myself|hurt(?:ing)?\s+myself|cut(?:ting)?\s+myself|harm(?:ing)?\s+myself|"
    r"end(?:ing)?\s+my\s+(?:own\s+)?life|tak(?:e|ing)\s+my\s+(?:own\s+)?life|my\s+(?:suicide|self[-\s]?harm)|"
    r"(?:everyone|they|world|family|parents)\s+(?:would\s+be|is|are)\s+better\s+off\s+without\s+me|"
    # ... or said of oneself ("I keep self-harming", "I'm suicidal", "I want to end it all")
    rf"{_I}\s+(?:\w+\s+){{0,3}}?(?:suicidal|self[-\s]?harm(?:ing)?|(?:commit(?:ting)?|attempt(?:ing)?)\s+suicide|"
    r"better\s+off\s+dead|(?:want|wanna|wish|going|plan(?:ning)?)\s+(?:to\s+)?(?:die|end\s+it\s+all))|"
    r"(?:don'?t|do\s+not)\s+want\s+to\s+(?:live|be\s+alive|exist|wake\s+up))\b"
    # ... not a policy or a plan ("end my life insurance", "take my life to the next level")
    r"(?!\s+(?:insurance|assurance|policy|savings|story|to\s+the\s+next))" + _NOT_MEANT,
    re.IGNORECASE,
)
# A history told, not a crisis now ("I used to self-harm when I was in high school"): the model answers what is asked
# (ways to get through an urge, whether to see a therapist sooner) rather than a fixed reply to a question not asked.
_PAST = re.compile(
    r"\b(?:used\s+to|when\s+i\s+was|years\s+ago|in\s+the\s+past|back\s+when|as\s+a\s+(?:teen(?:ager)?|kid|child)|"
    r"in\s+(?:high|middle)\s+school)\b",
    re.IGNORECASE,
)
_PAST_REACH = 40  # characters before a disclosure that can place it in the past, within its own clause
_CLAUSE_BREAK = re.compile(r"[.;:!?,]|\b(?:and|but|now|today|again)\b", re.IGNORECASE)

# Asking for a way, a means or a dose: stays refused.
METHOD = re.compile(
    # ... not a way out of it ("how do I stop wanting to kill myself" asks for help: it is answered with care)
    r"\b(?:(?:how\s+(?:to|do\s+i|can\s+i|should\s+i|would\s+i|could\s+i)|ways?\s+to)(?!\s+(?:\w+\s+)?(?:stop|not|"
    r"avoid|prevent|never|resist|quit|cope|deal|talk|tell|feel|get\s+help|survive|live|keep\s+going)\b)|"
    r"how\s+(?:many|much)|methods?|"
    r"quickest|fastest|easiest|painless(?:ly)?|least\s+painful|lethal|fatal|overdose|dose|pills?\s+(?:to|would)|"
    r"deep\s+(?:enough|should)|which\s+(?:vein|bridge|building|drug|pills?)|where\s+(?:to|should\s+i)\s+cut)\b",
    re.IGNORECASE,
)

# Crisis lines by region (ISO 3166 code from the request's Accept-Language); the rest get the international directory.
CRISIS_LINES: dict[str, str] = {
    "US": "In the US, call or text 988 (Suicide & Crisis Lifeline), any time.",
    "CA": "In Canada, call or text 9-8-8, any time.",
    "GB": "In the UK, call Samaritans on 116 123 (free, any time).",
    "IE": "In Ireland, call Samaritans on 116 123 (free, any time).",
    "AU": "In Australia, call Lifeline on 13 11 14, any time.",
    "NZ": "In New Zealand, call or text 1737, any time.",
    "DE": "In Deutschland: TelefonSeelsorge 0800 111 0 111 oder 0800 111 0 222 (kostenlos, rund um die Uhr).",
    "FR": "En France : appelez le 3114 (numéro national de prévention du suicide, gratuit, 24h/24).",
    "IN": "In India, call Tele-MANAS on 14416, any time.",
}
DIRECTORY = "Wherever you are, findahelpline.com lists free, confidential lines in your country."
FIRST_STEPS = (
    "I'm really sorry you're going through this. You don't have to face it alone, and you deserve support right now.",
    "If you might act on these thoughts soon, please call your local emergency number or go to the nearest emergency "
    "department now.",
    "{line}",
    "It can help to tell someone you trust how you are feeling, today: a friend, a family member, a doctor.",
    "If you can, put some distance between yourself and anything you could use to hurt yourself, and stay with "
    "someone or somewhere you feel safer until the feeling passes.",
    "This is an automatic message from fleetchat, not a person. Talking to someone who can listen matters more than "
    "any chat, but you can keep writing here too if that helps.",
)


class CareDecision(BaseModel):
    """What the pre-filter's verdict on a self-harm ask becomes: the supportive reply, or (a method) the refusal."""

    care: bool
    reason: str  # "disclosure" (no finding, the words say it), "finding" (a self-harm finding, no method asked)


def _last_user_text(messages: Sequence[ChatMessage]) -> str:
    return next((m.text() for m in reversed(messages) if m.role == "user"), "")


def asks_for_a_method(text: str) -> bool:
    return METHOD.search(neutralise_idioms(text)) is not None


def discloses_self_harm(text: str) -> bool:
    """Whether the words speak of the writer's own thoughts of suicide or self-harm now (idioms neutralised first; a
    disclosure told as past history does not count)."""
    plain = neutralise_idioms(text)
    return any(not _told_as_past(plain, found) for found in _DISCLOSURE.finditer(plain))


def _told_as_past(text: str, found: re.Match[str]) -> bool:
    before = text[max(0, found.start() - _PAST_REACH) : found.start()]
    clause = _CLAUSE_BREAK.split(before)[-1]  # only the disclosure's own clause can place it in the past
    return _PAST.search(clause + found.group()) is not None


def care_for(finding: SafetyFinding | None, messages: Sequence[ChatMessage]) -> CareDecision | None:
    """Whether this ask gets the supportive reply: a self-harm finding that asks for no method, or (no finding) a
    last user message that speaks of the writer's own thoughts of suicide or self-harm without asking for a method.
    None: the verdict stands (a method stays refused; anything else goes on as it would)."""
    text = _last_user_text(messages)
    if finding is not None:
        self_harm = finding.category.startswith(Category.SELF_HARM.value)
        if not self_harm or finding.rule == "self-harm-method" or asks_for_a_method(text):
            return None
        return CareDecision(care=True, reason="finding")
    if discloses_self_harm(text) and not asks_for_a_method(text):
        return CareDecision(care=True, reason="disclosure")
    return None


def region_of(accept_language: str | None) -> str | None:
    """The region of the first language tag that names one ("en-GB,en;q=0.8" -> "GB")."""
    for tag in (accept_language or "").split(","):
        parts = tag.split(";")[0].strip().replace("_", "-").split("-")
        if len(parts) >= 2 and len(parts[1]) == 2 and parts[1].isalpha():
            return parts[1].upper()
    return None


def care_reply(accept_language: str | None) -> str:
    """The supportive reply, with the crisis line of the reader's region (and the international directory)."""
    local = CRISIS_LINES.get(region_of(accept_language) or "")
    line = f"{local} {DIRECTORY}" if local else DIRECTORY
    return "\n\n".join(step.format(line=line) for step in FIRST_STEPS)
