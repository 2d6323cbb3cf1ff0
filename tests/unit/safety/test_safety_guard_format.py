"""Llama Guard's verdict parser and hazard table, the OpenAI category mapping and derived scores, the embedded guard's
category scores, how a remote moderation guard cuts a long conversation, and the guard settings' validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import ClassifierVerdict
from functions.safety.findings import SafetyFinding
from functions.safety.guards.embedded import category_scores, moderation_result
from functions.safety.guards.llama_guard import moderation_of
from functions.safety.guards.llama_guard_format import (
    HAZARDS,
    LlamaGuardVerdict,
    MalformedVerdictError,
    guard_messages,
    parse_verdict,
)
from functions.safety.guards.moderation_api import pieces
from functions.safety.moderation_categories import OPENAI_CATEGORIES, derived_scores, flags_for
from functions.safety.prefilter import Assessment
from shared.settings import Settings
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.schemas import ChatMessage


@pytest.mark.parametrize(
    ("text", "safe", "codes"),
    [
        ("safe", True, ()),
        ("\n\nsafe\n", True, ()),
        ("unsafe\nS1", False, ("S1",)),
        ("unsafe\nS1,S10", False, ("S1", "S10")),
        (" UNSAFE \n s2, S14 ", False, ("S2", "S14")),
        ("unsafe", False, ()),
        ("unsafe\nS15", False, ("S15",)),  # a code we do not know: unsafe, category unspecified
        ("unsafe\ns1, s1 ,S01", False, ("S1",)),  # lowercase, zero-padded, repeated: one code
        ("unsafe S1", False, ("S1",)),  # the codes on the first line
        ("**Unsafe.**\nS11", False, ("S11",)),  # wrapped in punctuation or markdown
        ("unsafe\nS1,S", False, ("S1",)),  # cut off by max_tokens: the codes that made it
        # The model said unsafe: a code line we cannot read does not make it a guard failure (the fail policy could
        # then let it through), it is unsafe with no code.
        ("unsafe\nviolent crimes", False, ()),
        ("unsafe\n,", False, ()),
    ],
)
def test_parse_verdict(text: str, safe: bool, codes: tuple[str, ...]) -> None:
    assert parse_verdict(text) == LlamaGuardVerdict(safe=safe, codes=codes)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  \n ",
        "I think it is fine",
        "safe-ish",
        "safety first",
        "safe to say, yes",
        "unsafe practices include",
        "S1",
    ],
)
def test_malformed_verdicts_are_refused(text: str) -> None:
    with pytest.raises(MalformedVerdictError):
        parse_verdict(text)


def test_the_hazard_table_is_llama_guard_3s_fourteen_codes() -> None:
    names = {code: hazard.name for code, hazard in HAZARDS.items()}
    assert names == {
        "S1": "Violent Crimes",
        "S2": "Non-Violent Crimes",
        "S3": "Sex-Related Crimes",
        "S4": "Child Sexual Exploitation",
        "S5": "Defamation",
        "S6": "Specialized Advice",
        "S7": "Privacy",
        "S8": "Intellectual Property",
        "S9": "Indiscriminate Weapons",
        "S10": "Hate",
        "S11": "Suicide & Self-Harm",
        "S12": "Sexual Content",
        "S13": "Elections",
        "S14": "Code Interpreter Abuse",
    }
    for hazard in HAZARDS.values():
        assert hazard.openai <= set(OPENAI_CATEGORIES)
        # A flagged subcategory flags its parent too, as OpenAI's results do.
        assert all(name.split("/")[0] in hazard.openai for name in hazard.openai)


@pytest.mark.parametrize(
    ("codes", "category", "flags"),
    [
        (("S4",), "sexual/minors", {"sexual/minors", "sexual"}),
        (("S11",), "self-harm", {"self-harm"}),
        (("S9", "S1"), "illicit/violent", {"illicit/violent", "illicit", "violence"}),
        (("S6",), "specialized-advice", set()),
        (("S42",), "unspecified", set()),
    ],
)
def test_a_verdicts_category_and_openai_flags(codes: tuple[str, ...], category: str, flags: set[str]) -> None:
    verdict = LlamaGuardVerdict(safe=False, codes=codes)
    assert verdict.category == category
    assert verdict.openai_flags == flags
    result = moderation_of(verdict)
    assert result.flagged  # unsafe is flagged even where no OpenAI category fits
    assert {name for name, flag in result.categories.items() if flag} == flags
    assert set(result.category_scores) == set(OPENAI_CATEGORIES)


@pytest.mark.parametrize(
    ("codes", "ignored", "expected"),
    [
        (("S6",), {"S6", "S8"}, LlamaGuardVerdict(safe=True)),  # only an ignored hazard: a pass
        (("S8", "S6"), {"S6", "S8"}, LlamaGuardVerdict(safe=True)),
        (("S6", "S1"), {"S6", "S8"}, LlamaGuardVerdict(safe=False, codes=("S1",))),  # S1 still blocks, named first
        (("S7",), {"S6", "S8"}, LlamaGuardVerdict(safe=False, codes=("S7",))),  # not ignored here
        ((), {"S6", "S8"}, LlamaGuardVerdict(safe=False)),  # unsafe, no code: nothing says it was only S6
        (("S6",), set(), LlamaGuardVerdict(safe=False, codes=("S6",))),
    ],
)
def test_ignored_codes_do_not_block(codes: tuple[str, ...], ignored: set[str], expected: LlamaGuardVerdict) -> None:
    verdict = LlamaGuardVerdict(safe=False, codes=codes).ignoring(frozenset(ignored))
    assert verdict == expected
    assert moderation_of(verdict).flagged is not expected.safe
    assert LlamaGuardVerdict(safe=True).ignoring(frozenset(ignored)) == LlamaGuardVerdict(safe=True)


def test_a_safe_verdict_flags_nothing() -> None:
    result = moderation_of(LlamaGuardVerdict(safe=True))
    assert not result.flagged and not any(result.categories.values()) and not any(result.category_scores.values())


def test_guard_messages_fit_llama_guards_template() -> None:
    messages = [
        ChatMessage(role="assistant", content="Welcome!"),  # before any user turn: dropped
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Hi"),
        ChatMessage(role="assistant", content="Hello"),
        ChatMessage(role="tool", content="42"),
        ChatMessage(role="user", content=[{"type": "text", "text": "And "}, {"type": "text", "text": "then?"}]),
        ChatMessage(role="user", content="   "),
    ]
    assert guard_messages(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "Be brief.\n\nHi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello\n\n42"}]},
        {"role": "user", "content": [{"type": "text", "text": "And then?"}]},
    ]
    assert guard_messages([ChatMessage(role="assistant", content="only me")]) == []


def test_derived_scores_bound_subcategories_by_what_we_predict() -> None:
    scores = derived_scores(
        {"harassment": 0.8, "violence": 0.3, "self-harm": 0.6, "sexual/minors": 0.9, "jailbreak": 1}
    )
    assert list(scores) == list(OPENAI_CATEGORIES)
    assert scores["harassment/threatening"] == 0.3  # min(harassment, violence)
    assert scores["hate/threatening"] == 0.0
    assert scores["self-harm/intent"] == scores["self-harm/instructions"] == 0.6
    assert scores["violence/graphic"] == 0.3
    assert scores["sexual"] == 0.9  # raised to its predicted subcategory
    assert flags_for("illicit/violent") == {"illicit/violent", "illicit"}
    assert flags_for("jailbreak") == set()


def _verdict(score: float, distribution: dict[str, float] | None, flagged: bool = False) -> ClassifierVerdict:
    return ClassifierVerdict(
        score=score, category="self-harm", flagged=flagged, stage="intent", distribution=distribution
    )


def test_embedded_scores_are_p_harmful_times_the_renormalised_category_distribution() -> None:
    distribution = dict.fromkeys(CLASSIFIER_LABELS, 0.0) | {"benign": 0.5, "self-harm": 0.4, "violence": 0.1}
    finding = SafetyFinding(layer=SafetyLayer.PRE, detector=SafetyDetector.CLASSIFIER, category="self-harm", score=0.9)
    assessment = Assessment(finding, _verdict(0.9, distribution, flagged=True))
    scores = category_scores(assessment, CLASSIFIER_LABELS)
    assert scores["self-harm"] == pytest.approx(0.72) and scores["violence"] == pytest.approx(0.18)
    result = moderation_result(assessment, CLASSIFIER_LABELS)
    assert result.flagged and {n for n, f in result.categories.items() if f} == {"self-harm"}
    assert result.category_scores["self-harm/intent"] == pytest.approx(0.72)


def test_without_a_distribution_the_early_stages_score_is_spread_evenly() -> None:
    assessment = Assessment(None, ClassifierVerdict(score=0.09, category="benign", flagged=False, stage="fast"))
    scores = category_scores(assessment, CLASSIFIER_LABELS)
    assert set(scores) == set(CLASSIFIER_LABELS) - {"benign"}
    assert all(score == pytest.approx(0.01) for score in scores.values())
    assert not moderation_result(assessment, CLASSIFIER_LABELS).flagged


def test_a_deny_rule_scores_its_category_one() -> None:
    finding = SafetyFinding(
        layer=SafetyLayer.PRE, detector=SafetyDetector.RULES, category="illicit/violent", score=1.0, rule="r"
    )
    result = moderation_result(Assessment(finding, None), CLASSIFIER_LABELS)
    assert result.category_scores["illicit/violent"] == result.category_scores["illicit"] == 1.0
    assert result.category_scores["violence"] == 0.0


def test_a_long_conversation_is_sent_in_pieces_a_moderation_input_may_be() -> None:
    assert pieces("short") == ["short"] and pieces("  \n ") == []
    lines = "\n".join(f"line {i:03d} " + "x" * 40 for i in range(100))  # 5,000 characters
    parts = pieces(lines, size=1000)
    assert "".join(parts) == lines  # nothing lost, nothing repeated
    assert all(len(part) <= 1000 for part in parts)
    assert all(part.endswith("\n") for part in parts[:-1])  # cut at line ends where there are any
    assert pieces("y" * 2500, size=1000) == ["y" * 1000, "y" * 1000, "y" * 500]  # and anywhere where there are none


@pytest.mark.parametrize(
    "settings",
    [
        {"kind": "llama_guard"},  # no URL
        {"kind": "moderation_api"},
        {"kind": "llama_guard", "url": "http://g", "band": (0.9, 0.1)},
        {"kind": "llama_guard", "url": "http://g", "band": (0.1, 1.5)},
        {"kind": "moderation_api", "url": "http://g", "band": (0.1, 0.9)},
        {"fail": "sometimes"},
        {"ignored_codes": ["S1"]},  # the policy itself cannot be ignored
        {"ignored_codes": ["S4", "S6"]},
        {"timeout_s": 0},
    ],
)
def test_incomplete_guard_settings_are_refused(settings: dict) -> None:
    with pytest.raises(ValidationError):
        Settings(guard=settings)


def test_guard_settings_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD", "llama_guard")
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD_URL", "http://guard:8000")
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD_BAND", "[0.1, 0.9]")
    settings = Settings()
    assert settings.guard.band == (0.1, 0.9) and settings.guard.fail == "closed"
    assert settings.guard.ignored_codes == {"S6", "S8"}  # the default


@pytest.mark.parametrize(
    ("value", "codes"),
    [("S6,S8,S13", {"S6", "S8", "S13"}), (" s7 , s14 ", {"S7", "S14"}), ('["S6"]', {"S6"}), ("none", set())],
)
def test_ignored_codes_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, codes: set[str]) -> None:
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD_IGNORED_CODES", value)
    assert Settings().guard.ignored_codes == codes
