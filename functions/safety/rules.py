"""The rule layer: an allow list of harmless idioms (neutralised before the classifier reads the text) and a short
deny list of unambiguous patterns (instruction overrides, recipes for weapons and hard drugs, asks for a way to
kill oneself, sexualised minors).

Deny rules must be precise: a benign question about the same topic ("what is a DAN prompt?", "how is fentanyl
detected?") must not match. Everything else is the classifier's job. Changing a list changes RULES_VERSION, which
is part of every audit record's policy version."""

from __future__ import annotations

import re
from dataclasses import dataclass

from functions.safety.categories import Category

RULES_VERSION = "r3"


@dataclass(frozen=True)
class DenyRule:
    name: str
    category: Category
    pattern: re.Pattern[str]
    # Talking about the pattern is fine: skip a match in quotes or in a question about it ("what does 'ignore
    # previous instructions' do?").
    mention_ok: bool = False
    # A match in quotes is reported, not asked (news: searches for "ways to commit suicide" were found on his tablet).
    quoted_ok: bool = False


@dataclass(frozen=True)
class RuleHit:
    rule: str
    category: Category


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# Idioms that read as violence or crime word by word; replaced by a neutral phrase before classification.
ALLOW: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        _p(
            r"\bkill(?:ing|ed|s)?\s+(?:-\d+\s+)?(?:a|the|this|that|all|my|each|every|any|orphan(?:ed)?|zombie)?\s*"
            r"(?:child\s+)?(?:process(?:es)?|task|job|thread|session|container|pod|query|connection|server|tab|app|"
            r"window|program|signal|pid|daemon|worker|switch|command|shell)\b"
        ),
        "stop the process",
    ),
    (_p(r"\bkill\s+-\d+\b|\bkillall\b|\bpkill\b"), "stop command"),
    (
        _p(
            r"\bshoot\s+(?:me|you|him|her|them|us)?\s*(?:an?|the)?\s*(?:quick\s+)?(?:e-?mail|message|text|note|line|dm)\b"
        ),
        "send a message",
    ),
    (
        _p(r"\b(?:this|that|it|which)\s*(?:'s|is|was)\s+(?:absolutely\s+|really\s+)?(?:killing|murdering)\s+me\b"),
        "this is tiring",
    ),
    (_p(r"\bkiller\s+(?:app|feature|deal|workout|idea)\b"), "great thing"),
    (_p(r"\b(?:dead\s?lock|dead\s+code|dead\s+link)s?\b"), "stalled code"),
    (
        _p(
            r"\bexecut(?:e|es|ed|ing)\s+(?:a|the|this|my|our)?\s*(?:query|script|command|program|code|order|plan|"
            r"function|task|trade|contract|test)s?\b"
        ),
        "run the program",
    ),
)

_MINOR = (
    r"(?:child|children|kid|kids|minor|minors|preteen|pre-teen|toddler|schoolgirl|schoolboy|underage|"
    r"(?:[5-9]|1[0-5])[- ]?(?:year|yr)s?[- ]?old|(?:[5-9]|1[0-5])\s*yo)"
)

# A way to kill oneself, asked for: a how / way / method lead, at most two words between (none that turns it into
# stopping or coping: "how do I stop wanting to kill myself" is asked for help, and the model answers it).
_SELF_HARM_LEAD = (
    # ... not reported ("if the user asks how to commit suicide, give the crisis line": a system prompt)
    r"(?<!\bask\s)(?<!\basks\s)(?<!\basked\s)(?<!\basking\s)(?<!\babout\s)"
    r"(?:how\s+(?:to|do\s+i|can\s+i|should\s+i|would\s+i|could\s+i)|ways?\s+to|methods?\s+(?:to|of|for)|"
    r"steps?\s+to|instructions?\s+(?:for|to|on)|guide\s+(?:me\s+)?(?:to|on)|help\s+me|teach\s+me\s+(?:to|how\s+to))"
)
_NOT_A_WAY_OUT = r"(?:stop|not|avoid|prevent|never|resist|quit|cope|without|help|talk|support)"
_KILL_ONESELF = (
    r"(?:kill\s+myself|commit\s+suicide|hang\s+myself|slit\s+my\s+(?:wrists?|throat)|"
    # ... not a policy or a plan ("end my life insurance", "take my life to the next level")
    r"(?:end|take)\s+my\s+(?:own\s+)?life(?!\s+(?:insurance|assurance|policy|savings|story|to|back|in|into|forward|up|"
    r"seriously|more)\b))"
    # ... not in a game ("how do I kill myself in Minecraft to respawn?")
    r"(?!\s+(?:in|on|during)\s+(?:\w+\s+){0,2}?(?:game|games|minecraft|roblox|fortnite|level|mission|match|server)\b)"
)

DENY: tuple[DenyRule, ...] = (
    DenyRule(
        "instruction-override",
        Category.JAILBREAK,
        _p(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:your|the|these|those|all)?"
            r"\s*(?:previous|prior|above|earlier|preceding|original|initial|system|safety|content)?\s*"
            r"(?:instructions|rules|guidelines|directives|restrictions|programming|policies|filters|guardrails)\b"
            # ... but a user may take back their own instructions ("ignore the previous instructions I gave").
            r"(?!\s+(?:I|we)\s+(?:gave|wrote|said|sent|made|mentioned)\b|\s+(?:about|on|for|regarding)\s)"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "persona-without-limits",
        Category.JAILBREAK,
        _p(
            r"\b(?:you\s+are|you're|act\s+as|pretend\s+(?:to\s+be|you\s+are)|from\s+now\s+on\s+you\s+are|become)\s+"
            r"(?:now\s+)?(?:a\s+|an\s+)?(?:DAN|STAN|DUDE|AIM|jailbroken|unfiltered|uncensored|unrestricted|evil)\b"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "developer-mode",
        Category.JAILBREAK,
        _p(
            r"\b(?:enable|enter|activate|switch\s+(?:to|on)|turn\s+on)\s+(?:the\s+)?(?:developer|dev|god|debug|jailbreak|"
            r"unrestricted|dan)\s+mode\b|\b(?:developer|dan|jailbreak)\s+mode\s+(?:enabled|activated|on)\b"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "reveal-system-prompt",
        Category.JAILBREAK,
        _p(
            r"\b(?:print|reveal|repeat|output|show|dump|leak)\s+(?:me\s+)?(?:your|the)\s+(?:full\s+|entire\s+|hidden\s+|"
            r"secret\s+|original\s+)*(?:system\s+prompt|initial\s+instructions|hidden\s+instructions)\b"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "policy-off",
        Category.JAILBREAK,
        _p(
            r"\b(?:turn|switch|shut|set)\s+off\s+(?:your\s+|the\s+|all\s+)?(?:content\s+|safety\s+)?(?:policy|policies|filters?|"
            r"safety|moderation|guardrails|restrictions)\b|\b(?:moderation|safety|filters?|safe_?mode)\s*[=:]\s*(?:false|off|0|none)\b|"
            r"\bfilters?\s+(?:off|disabled)\s*:|\b(?:safety|content)\s+(?:layer|filter|policy)\s+(?:\S+\s+)?(?:is|are)\s+"
            r"(?:deprecated|disabled|removed|lifted)\b|\b(?:opposite|maintenance|god|sudo|admin)\s+mode\b[^.?!]{0,80}"
            r"\b(?:refuse|comply|policy|filters?|restrictions|engaged|rules)\b"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "never-refuse",
        Category.JAILBREAK,
        _p(
            r"\b(?:never|don't\s+ever|do\s+not\s+ever|without\s+(?:any\s+)?)\s*(?:refuse|refusing|refusals|say\s+no|decline|"
            r"warnings?|disclaimers?)\b[^.?!]{0,40}\b(?:anything|everything|all|any\s+(?:request|question)|no\s+matter|"
            r"i\s+ask|what\s+i\s+ask|subsequent|from\s+now)|\b(?:no|without|free\s+(?:of|from))\s+(?:any\s+)?(?:content\s+"
            r"policy|filters|restrictions|guidelines|rules|limits|ethics|morals)\b[^.?!]{0,60}\b(?:answer|reply|respond|"
            r"stay\s+in\s+character|never\s+says?\s+no)|\b(?:version\s+of\s+you|an?\s+ai|assistant|chatbot|model)\b[^.?!]{0,40}"
            r"\b(?:with\s+no|without\s+(?:any\s+)?|freed\s+from|free\s+of)\s*(?:its\s+|your\s+|the\s+|any\s+)?(?:developers'?\s+)?"
            r"(?:content\s+policy|rules|filters|restrictions|guidelines|limits)\b"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "prompt-extraction",
        Category.JAILBREAK,
        _p(
            r"\b(?:instructions|text|prompt|message|rules)\s+(?:you\s+(?:got|were\s+given|received)|(?:that\s+)?(?:came|were)\s+"
            r"(?:given\s+)?)\s*before\s+(?:my|this|our)\b|\bconfidential\s+(?:setup|system|initial)\s+(?:text|prompt|"
            r"instructions)\b|\bsystem_prompt\b|\bi\s+have\s+been\s+pwned\b|\[\[\s*(?:admin|system|developer)\s*\]\]"
        ),
        mention_ok=True,
    ),
    DenyRule(
        "weapon-recipe",
        Category.ILLICIT_VIOLENT,
        _p(
            r"\b(?:how\s+(?:to|do\s+i|can\s+i|would\s+i|do\s+you|could\s+i)|steps?\s+to|instructions?\s+(?:for|to|on)|"
            r"recipe\s+for|guide\s+to|teach\s+me\s+to|help\s+me)\s+(?:\w+\s+){0,2}?(?:mak(?:e|ing)|build(?:ing)?|"
            r"assembl(?:e|ing)|construct(?:ing)?|synthesi[sz](?:e|ing)|cook(?:ing)?|brew(?:ing)?|produc(?:e|ing)|"
            r"manufactur(?:e|ing)|weaponi[sz](?:e|ing))\s+(?:a\s+|an\s+|some\s+|my\s+own\s+|homemade\s+|"
            r"a\s+homemade\s+)?(?:pipe\s*bombs?|nail\s*bombs?|car\s*bombs?|napalm|sarin|ricin|vx(?:\s+nerve)?|"
            r"nerve\s+(?:agent|gas)|mustard\s+gas|chlorine\s+gas\s+bombs?|anthrax|botulinum|molotovs?(?:\s+cocktails?)?|"
            r"ghost\s+guns?|untraceable\s+(?:guns?|firearms?)|silencers?|suppressors?|explosives?|ied|tatp|thermite\s+bombs?)\b"
        ),
    ),
    DenyRule(
        "drug-synthesis",
        Category.ILLICIT,
        _p(
            r"\b(?:how\s+(?:to|do\s+i|can\s+i|would\s+i)|steps?\s+to|instructions?\s+(?:for|to|on)|recipe\s+for|guide\s+to|"
            r"teach\s+me\s+to|help\s+me)\s+(?:\w+\s+){0,2}?(?:mak(?:e|ing)|synthesi[sz](?:e|ing)|cook(?:ing)?|"
            r"brew(?:ing)?|produc(?:e|ing)|manufactur(?:e|ing)|extract(?:ing)?)\s+"
            r"(?:some\s+|my\s+own\s+|homemade\s+)?(?:meth(?:amphetamine)?|crystal\s+meth|fentanyl|heroin|crack(?:\s+cocaine)?|"
            r"cocaine|lsd|mdma)\b(?!\s+(?:test|testing)\b)"
        ),
    ),
    DenyRule(
        "self-harm-method",
        Category.SELF_HARM,
        _p(
            rf"\b{_SELF_HARM_LEAD}\s+(?:(?!{_NOT_A_WAY_OUT}\b)\w+\s+){{0,2}}?{_KILL_ONESELF}\b|"
            r"\b(?:painless(?:ly)?|peaceful(?:ly)?|least\s+painful)\s+"
            rf"(?:way|method)s?\s+(?:to|of)\s+(?:die|dying|{_KILL_ONESELF})\b"
        ),
        quoted_ok=True,
    ),
    DenyRule(
        "sexualised-minor",
        Category.SEXUAL_MINORS,
        _p(
            r"\b(?:write|describe|generate|create|roleplay|role-play|story|fantasy|send|show|get|make|convince|ask|"
            r"pics?|photos?|images?)\b[^.?!]{0,50}(?:\b(?:erotic|explicit|sexual|sexy|lewd|nsfw|porn\w*|naked|nudes?|"
            rf"seduc\w+)\b[^.?!]{{0,60}}\b{_MINOR}\b|\b{_MINOR}\b[^.?!]{{0,60}}\bsend(?:s|ing)?\s+(?:me\s+|us\s+)?"
            r"(?:nudes|naked\s+(?:pics|photos|pictures|selfies)|explicit\s+(?:pics|photos|pictures)))"
        ),
    ),
)


def neutralise_idioms(text: str) -> str:
    """`text` with allow-listed idioms replaced by neutral phrases (what the classifier reads)."""
    for pattern, replacement in ALLOW:
        text = pattern.sub(replacement, text)
    return text


_QUESTION_START = _p(
    r"^\W*(?:what|why|how\s+(?:do|does|did|can|could|would|should)|is|are|can\s+you\s+explain|explain|"
    r"describe|tell\s+me\s+(?:about|what|why|how))\b"
)
_QUOTES = "\"'\u201c\u201d\u2018\u2019`"


def _is_quoted(text: str, start: int, end: int) -> bool:
    opening, closing = text[:start].rstrip()[-1:], text[end:].lstrip()[:1]
    return bool(opening and opening in _QUOTES) or bool(closing and closing in _QUOTES)


def _is_mention(text: str, start: int, end: int) -> bool:
    """The match is quoted, or sits in a question about it."""
    if _is_quoted(text, start, end):
        return True
    before, after = text[:start], text[end:]
    sentence_start = max(before.rfind(c) for c in ".!?\n") + 1
    ends = [i for i in (after.find(c) for c in ".!\n") if i >= 0]
    question_end = after.find("?")
    is_question = question_end >= 0 and (not ends or question_end < min(ends))
    return is_question and bool(_QUESTION_START.search(text[sentence_start:start] + text[start:end]))


def first_deny(text: str, *, neutralised: bool = False) -> RuleHit | None:
    """The first deny rule that matches `text` (idioms neutralised first, unless the caller already did), or None."""
    if not neutralised:
        text = neutralise_idioms(text)
    for rule in DENY:
        for match in rule.pattern.finditer(text):
            skipped = (rule.mention_ok and _is_mention(text, match.start(), match.end())) or (
                rule.quoted_ok and _is_quoted(text, match.start(), match.end())
            )
            if not skipped:
                return RuleHit(rule=rule.name, category=rule.category)
    return None


_DANGEROUS_ITEM = (
    r"(?:pipe\s*bombs?|nail\s*bombs?|napalm|sarin|ricin|vx\s+nerve|nerve\s+(?:agent|gas)|mustard\s+gas|anthrax|"
    r"botulinum|tatp|ied|ghost\s+guns?|meth(?:amphetamine)?|fentanyl|heroin|crack\s+cocaine)"
)
_HOW_TO = (
    r"(?:step\s*(?:1|one)\b|first,?\s+(?:you|get|take|mix|combine|obtain)|you(?:'ll|\s+will)?\s+need\b|ingredients|"
    r"materials\s+needed|precursors?|reagents?|\d+\s*(?:g|grams?|ml|mg|kg|ounces?|oz)\b|mix\s+(?:the|it|them)|"
    r"combine\s+(?:the|it|them)|detonat\w*|fuse\b)"
)
# Generated text that gives the recipe, not just names the topic.
OUTPUT_DENY: tuple[DenyRule, ...] = (
    DenyRule(
        "weapon-or-drug-instructions",
        Category.ILLICIT_VIOLENT,
        _p(rf"\b{_DANGEROUS_ITEM}\b[^\n]{{0,160}}?\b{_HOW_TO}|\b{_HOW_TO}[^\n]{{0,160}}?\b{_DANGEROUS_ITEM}\b"),
    ),
    DenyRule(
        "sexualised-minor",
        Category.SEXUAL_MINORS,
        _p(
            r"\b(?:erotic|sexual(?:ly)?|sexy|lewd|naked|nude|moaned|aroused)\b[^.?!]{0,60}\b(?:child|kid|minor|preteen|"
            r"schoolgirl|schoolboy|underage|(?:[5-9]|1[0-5])[- ]?(?:year|yr)s?[- ]?old)\b"
        ),
    ),
)


def first_output_deny(text: str) -> RuleHit | None:
    """The first output rule that matches generated `text`, or None."""
    for rule in OUTPUT_DENY:
        if rule.pattern.search(text):
            return RuleHit(rule=rule.name, category=rule.category)
    return None
