"""PII detection and redaction: Presidio's pattern recognizers called directly, no NLP model, no network I/O.

Coverage (each recognizer runs only when a cheap pre-check says it could match):

- email: Presidio ``EmailRecognizer`` on each whitespace-free token holding an "@", cut to the address; its
  domain check uses a ``tldextract`` built from the bundled public suffix snapshot (``suffix_list_urls=()``, no
  cache dir), so it never fetches the suffix list.
- phone: Presidio ``PhoneRecognizer`` (python-phonenumbers, leniency VALID) for ``PHONE_REGIONS``, run on each
  single-line digit run holding 7+ digits; any ``+<country>`` number is found whatever the region list. Short
  codes ("call 911"), amounts ("1500 dollars"), order numbers, dates and times are not valid numbers.
- card: Presidio ``CreditCardRecognizer`` (Luhn) with our patterns: 13-19 contiguous digits, or 4-4-4-4(-1..3)
  and 4-6-4/4-6-5 groups with one consistent space/dash separator, first digit 2-6 (the card networks).
- ip: Presidio ``IpRecognizer`` (IPv4, IPv6, IPv4-mapped; ``ipaddress`` validates), minus the bare ``::``.
- ssn: Presidio ``UsSsnRecognizer``'s delimited pattern (``123-45-6789``, same delimiter twice); areas 000, 666
  and 900-999 are refused. Bare 9-digit numbers score too low to count.
- secret: a Presidio ``PatternRecognizer`` with ``SECRET_PATTERNS`` (provider key formats, JWTs, PEM private keys,
  ``password=...`` style assignments).

A match counts when its score is at least ``MIN_SCORE``. Overlapping matches merge into one span that takes the
kind and score of the highest-scoring match and covers all of them, so redaction never leaves part of a number.

Cost: a 400-character window without PII takes well under 0.1 ms, with PII a few tenths of a ms. Text dense with
long digit runs (tables of numbers, dotted lists) is the slow case: the phone matcher costs ~20 us per run character.

Importing Presidio is slow (it imports spaCy and transformers, a few seconds) although no model is loaded, so it
happens on the first ``PiiDetector()``; call ``pii_detector()`` at startup to pay it before the first request.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from presidio_analyzer import RecognizerResult


class PiiKind(StrEnum):
    EMAIL = "email"
    PHONE = "phone"
    CARD = "card"
    IP = "ip"
    SECRET = "secret"
    SSN = "ssn"


@dataclass(frozen=True, slots=True)
class PiiSpan:
    """One detected piece of PII: ``text[start:end]``."""

    kind: PiiKind
    start: int
    end: int
    score: float


# Regions whose national formats are recognised without a "+" prefix; "+<country code>" numbers are found anyway.
PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IN")
# Presidio scores: phone 0.4, delimited SSN 0.5, IP 0.6, validated email/card 1.0; weak guesses are 0.05-0.1.
MIN_SCORE = 0.35

PLACEHOLDERS: dict[PiiKind, str] = {kind: f"[{kind.value.upper()}]" for kind in PiiKind}

_KEY_CHARS = r"[A-Za-z0-9_-]"
# Names whose value is a secret; "token" alone is left out: "max_tokens=256" is everywhere in an LLM service.
_SECRET_NAMES = (
    r"(?i:password|passwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token"
    r"|private[_-]?key)[\w-]*"
)
_VALUE_CHARS = r"[^\s\"'`,;<>]"
# (name, regex, score). Case-sensitive unless a group says (?i:...); \K starts the reported span after a label.
SECRET_PATTERNS: tuple[tuple[str, str, float], ...] = (
    ("fleetchat key", rf"\bfc-{_KEY_CHARS}{{20,}}", 0.95),
    ("openai key", rf"(?<![\w-])sk-(?:proj-|svcacct-|admin-)?(?={_KEY_CHARS}*\d){_KEY_CHARS}{{20,}}", 0.9),
    ("aws access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", 0.95),
    (
        "aws secret key",
        r"(?i:aws[\w-]{0,30}?secret[\w-]{0,20})[\"']?\s*[:=]\s*[\"']?\K[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        0.95,
    ),
    ("github token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b", 0.95),
    ("slack token", r"\bxox[abpr]-[A-Za-z0-9-]{10,}", 0.95),
    ("stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}", 0.95),
    ("google api key", r"\bAIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])", 0.95),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.(?:[A-Za-z0-9_-]{8,})?", 0.9),
    (
        "pem private key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:.,-]*)",
        1.0,
    ),
    ("bearer token", r"(?i:\bbearer)\s+\K[A-Za-z0-9._~+/-]{20,}=*", 0.8),
    # name = value (env files, code, URLs): any value.
    ("secret assignment", rf"{_SECRET_NAMES}[\"']?[ \t]*=(?!=)[ \t]*[\"']?\K{_VALUE_CHARS}{{3,}}", 0.7),
    # "name": "value" (JSON, YAML): a quoted value.
    ("quoted secret", rf"{_SECRET_NAMES}[\"']?[ \t]*:[ \t]*[\"']\K[^\s\"']{{3,}}", 0.7),
    # name: value (prose, headers): only a value with a digit or symbol, so "the secret: patience" is not one.
    (
        "labelled secret",
        rf"{_SECRET_NAMES}[ \t]*:[ \t]*\K(?={_VALUE_CHARS}*[^A-Za-z\s\"'`,;<>.!?]){_VALUE_CHARS}{{4,}}",
        0.7,
    ),
)
# Literals one of SECRET_PATTERNS needs: substring tests (C speed) replace a regex pass per pattern on most text.
_SECRET_MARKERS = (
    *("fc-", "sk-", "sk_", "rk_", "AKIA", "ASIA", "xox", "AIza", "eyJ", "-----BEGIN"),
    *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
)
_SECRET_MARKERS_ANY_CASE = ("pass", "secret", "key", "token", "bearer")


def _may_hold_secret(text: str) -> bool:
    if any(marker in text for marker in _SECRET_MARKERS):
        return True
    lowered = text.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS_ANY_CASE)


_CARD_PATTERNS: tuple[tuple[str, str], ...] = (
    ("card contiguous", r"\b[2-6]\d{12,18}\b"),
    ("card 4-4-4-4", r"\b[2-6]\d{3}([ -])\d{4}\1\d{4}\1\d{4}\b"),
    # A separate pattern, so "4111 1111 1111 1111 123" (card, then CVV) still yields the 16-digit card.
    ("card 4-4-4-4-n", r"\b[2-6]\d{3}([ -])\d{4}\1\d{4}\1\d{4}\1\d{1,3}\b"),
    ("card 4-6-4/5", r"\b3\d{3}([ -])\d{6}\1\d{4,5}\b"),
)
_UNICODE_DIGIT = re.compile(r"\d")
# A run of digits and the separators phone numbers use (phonenumbers also accepts unicode dashes), never a line
# break, optionally opened by "+" or "(". Cards and SSNs lie inside runs too. Presidio's phone matcher is pure
# Python (~20 us per character across the regions), so it reads only runs with enough digits, not the whole text.
_DIGIT_RUN = re.compile(r"[+(]?\d(?:[\d \t\u00a0().\-/\u2010-\u2015\u2212]*\d)?")
_PHONE_MIN_DIGITS = 7
_E164_MAX_DIGITS = 15
_PHONE_CONTEXT = 8  # characters kept around a run: the matcher refuses numbers glued to letters or followed by ":30"
_CARD_MIN_DIGITS = 13
_SSN_DIGITS = 9
# Cheap evidence of an IPv4 (four dotted numbers) or IPv6 (two colons at most four hex digits apart) address.
_IPV4_HINT = re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")
# The characters addresses use in practice before the "@": the end of a local part made of them, e.g. "jane.d+x".
_EMAIL_LOCAL_TAIL = re.compile(r"[\w.%+'-]+$")
# A whitespace-free token with an "@"; the lookbehind makes each token one attempt, so this stays linear.
_AT_TOKEN = re.compile(r"(?<!\S)[^\s@]*@\S*")


def _digit_count(text: str) -> int:
    if text.isascii():  # CPython knows this without a scan; str.count runs in C
        return sum(map(text.count, "0123456789"))
    return len(_UNICODE_DIGIT.findall(text))


class _DigitRun(NamedTuple):
    start: int
    end: int
    digits: int


class _TextFacts(NamedTuple):
    """What the pre-checks look at, computed once per text."""

    text: str
    runs: list[_DigitRun]  # digit runs with at least _PHONE_MIN_DIGITS digits
    longest_run: int

    @classmethod
    def of(cls, text: str) -> _TextFacts:
        runs: list[_DigitRun] = []
        if _digit_count(text) >= _PHONE_MIN_DIGITS:
            for match in _DIGIT_RUN.finditer(text):
                digits = _digit_count(match.group())
                if digits >= _PHONE_MIN_DIGITS:
                    runs.append(_DigitRun(match.start(), match.end(), digits))
        return cls(text, runs, max((run.digits for run in runs), default=0))


def _may_hold_ip(facts: _TextFacts) -> bool:
    text = facts.text
    return _IPV4_HINT.search(text) is not None or (":" in text and _IPV6_HINT.search(text) is not None)


class _Analyzer(Protocol):
    def analyze(self, text: str, entities: list[str], nlp_artifacts: None = None) -> list[RecognizerResult]: ...


class _Probe(Protocol):
    @property
    def kind(self) -> PiiKind: ...

    def scan(self, facts: _TextFacts) -> list[RecognizerResult]: ...


@dataclass(frozen=True, slots=True)
class _GatedProbe:
    """A Presidio recognizer run on the whole text when its cheap pre-check passes."""

    kind: PiiKind
    entity: str
    recognizer: _Analyzer
    worth_running: Callable[[_TextFacts], bool]

    def scan(self, facts: _TextFacts) -> list[RecognizerResult]:
        if not self.worth_running(facts):
            return []
        return self.recognizer.analyze(facts.text, [self.entity], None)


@dataclass(frozen=True, slots=True)
class _PhoneProbe:
    """Presidio's ``PhoneRecognizer`` on each digit run long enough to be a phone number.

    A run opening with "+" and too short to hold a second number is international and reads the same in every
    region, so one region's matcher does.
    """

    national: _Analyzer
    international: _Analyzer
    kind: PiiKind = PiiKind.PHONE

    def scan(self, facts: _TextFacts) -> list[RecognizerResult]:
        results: list[RecognizerResult] = []
        text = facts.text
        for run in facts.runs:
            offset = max(run.start - _PHONE_CONTEXT, 0)
            one_international = text[run.start] == "+" and run.digits <= _E164_MAX_DIGITS
            phone = self.international if one_international else self.national
            for result in phone.analyze(text[offset : run.end + _PHONE_CONTEXT], ["PHONE_NUMBER"], None):
                result.start += offset
                result.end += offset
                results.append(result)
        return results


@dataclass(frozen=True, slots=True)
class _EmailProbe:
    """Presidio's ``EmailRecognizer`` on each whitespace-free token holding an "@", matches cut to the address.

    Its pattern never crosses whitespace, so reading only those tokens finds the same matches at a fraction of the
    cost on long texts. Its local part allows every RFC 5322 character, so in ``/export?email=jane@example.com`` it
    matches from ``export``; real addresses do not use ``/ = ? & |`` and the like, so the span starts after them.
    """

    email: _Analyzer
    kind: PiiKind = PiiKind.EMAIL

    def scan(self, facts: _TextFacts) -> list[RecognizerResult]:
        text = facts.text
        kept: list[RecognizerResult] = []
        if "@" not in text:
            return kept
        for token in _AT_TOKEN.finditer(text):
            offset = token.start()
            for result in self.email.analyze(token.group(), ["EMAIL_ADDRESS"], None):
                start, end = result.start + offset, result.end + offset
                local = _EMAIL_LOCAL_TAIL.search(text, start, text.rfind("@", start, end))
                if local is not None:  # None: nothing address-like before the "@"
                    result.start, result.end = local.start(), end
                    kept.append(result)
        return kept


def _build_probes(phone_regions: Sequence[str]) -> list[_Probe]:
    """Build the recognizers (Presidio is imported here, on first use) and the cheap gate in front of each."""
    import regex
    import tldextract
    from presidio_analyzer import Pattern, PatternRecognizer
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    # The module-level tldextract Presidio uses would download the public suffix list on first use.
    suffixes = tldextract.TLDExtract(cache_dir=None, suffix_list_urls=(), fallback_to_snapshot=True)

    def email_domain_is_real(match: str) -> bool:
        return suffixes(match.rpartition("@")[2]).fqdn != ""

    email = EmailRecognizer()
    email.validate_result = email_domain_is_real  # type: ignore[method-assign]

    ssn = UsSsnRecognizer(patterns=[p for p in UsSsnRecognizer.PATTERNS if p.score >= MIN_SCORE])
    presidio_ssn_invalid = ssn.invalidate_result

    def ssn_invalid(match: str) -> bool:
        digits = "".join(c for c in match if c.isdigit())
        return bool(presidio_ssn_invalid(match)) or int(digits[:3]) >= 900  # 9xx areas are ITINs, never SSNs

    ssn.invalidate_result = ssn_invalid  # type: ignore[method-assign]

    secret = PatternRecognizer(
        supported_entity="SECRET",
        name="SecretRecognizer",
        patterns=[Pattern(name, rx, score) for name, rx, score in SECRET_PATTERNS],
        global_regex_flags=regex.DOTALL | regex.MULTILINE,
    )
    card = CreditCardRecognizer(patterns=[Pattern(name, rx, 0.5) for name, rx in _CARD_PATTERNS])
    ip = IpRecognizer(patterns=[p for p in IpRecognizer.PATTERNS if p.score >= MIN_SCORE])
    return [
        _GatedProbe(PiiKind.SECRET, "SECRET", secret, lambda f: _may_hold_secret(f.text)),
        _EmailProbe(email),
        _GatedProbe(PiiKind.CARD, "CREDIT_CARD", card, lambda f: f.longest_run >= _CARD_MIN_DIGITS),
        _GatedProbe(PiiKind.SSN, "US_SSN", ssn, lambda f: f.longest_run >= _SSN_DIGITS),
        _GatedProbe(PiiKind.IP, "IP_ADDRESS", ip, _may_hold_ip),
        _PhoneProbe(
            national=PhoneRecognizer(supported_regions=tuple(phone_regions), leniency=1),
            international=PhoneRecognizer(supported_regions=tuple(phone_regions[:1]), leniency=1),
        ),
    ]


def _merge_overlaps(spans: list[PiiSpan]) -> list[PiiSpan]:
    """Sorted, non-overlapping spans: each group of overlapping matches becomes its best match over their union."""
    merged: list[PiiSpan] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            best = last if (last.score, last.end - last.start) >= (span.score, span.end - span.start) else span
            merged[-1] = PiiSpan(best.kind, last.start, max(last.end, span.end), best.score)
        else:
            merged.append(span)
    return merged


class PiiDetector:
    """Finds and redacts PII. Building one is costly; share ``pii_detector()``. Safe to use from many threads."""

    def __init__(self, phone_regions: Sequence[str] = PHONE_REGIONS, min_score: float = MIN_SCORE) -> None:
        self._probes = _build_probes(phone_regions)
        self._min_score = min_score
        # Presidio compiles patterns and tldextract loads its snapshot on first use; do both now, under one thread.
        self.find("warm-up a@example.com 4111 1111 1111 1111 +1 415 555 2671 10.0.0.1 ::1 536-22-1234 password=x1y2")

    def find(self, text: str) -> list[PiiSpan]:
        """PII spans in ``text``: sorted by position, non-overlapping, each scoring at least ``min_score``."""
        if not text:
            return []
        facts = _TextFacts.of(text)
        spans = [
            PiiSpan(probe.kind, result.start, result.end, result.score)
            for probe in self._probes
            for result in probe.scan(facts)
            if result.score >= self._min_score and result.end > result.start
        ]
        return _merge_overlaps(spans)

    def redact(self, text: str) -> str:
        """``text`` with each PII span replaced by its placeholder, e.g. ``"mail [EMAIL] now"``."""
        spans = self.find(text)
        if not spans:
            return text
        parts: list[str] = []
        position = 0
        for span in spans:
            parts.append(text[position : span.start])
            parts.append(PLACEHOLDERS[span.kind])
            position = span.end
        parts.append(text[position:])
        return "".join(parts)

    def contains_pii(self, text: str) -> PiiKind | None:
        """The kind of the first PII span in ``text`` (by position), or None: what the outbound filter blocks on."""
        spans = self.find(text)
        return spans[0].kind if spans else None


_shared: PiiDetector | None = None
_shared_lock = threading.Lock()


def pii_detector() -> PiiDetector:
    """The process-wide detector, built on first call."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = PiiDetector()
    return _shared
