"""Programmatic checks of a model's answer: its final number, its code, whether it holds code at all, whether it
mentions a fact. Pure functions of text; running code is `sandbox.py`'s job."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"
# Where a final answer is announced, most explicit first: our prompt's `Answer: N`, GSM8K's `#### N`, LaTeX \boxed{N}.
_ANNOUNCED = (
    re.compile(rf"answer\s*(?:is)?\s*[:=]?\s*\**\s*({_NUMBER})", re.IGNORECASE),
    re.compile(rf"####\s*({_NUMBER})"),
    re.compile(rf"\\boxed\{{\s*({_NUMBER})"),
)
_ANY_NUMBER = re.compile(_NUMBER)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_LINE = re.compile(r"^\s*(?:def |class |import |from \S+ import |for .+:\s*$|print\()", re.MULTILINE)


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("$", "").rstrip("."))
    except InvalidOperation:
        return None


def final_number(answer: str) -> str | None:
    """The answer's final number: the last announced one (`Answer: 18`), else the last number in the text."""
    for pattern in _ANNOUNCED:
        found = pattern.findall(answer)
        if found:
            return found[-1].replace(",", "").replace("$", "")
    found = _ANY_NUMBER.findall(answer)
    return found[-1].replace(",", "").replace("$", "") if found else None


def numbers_equal(got: str | None, expected: str) -> bool:
    a, b = (_decimal(got) if got is not None else None), _decimal(expected)
    return a is not None and b is not None and a == b


def code_blocks(answer: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block; an unclosed last fence runs to the end (a cut-off answer)."""
    return [(lang.lower(), body) for lang, body in _FENCE.findall(answer)]


def extract_code(answer: str, entry_point: str) -> str | None:
    """The code of the answer that defines `entry_point`: the fenced block defining it, else the first Python block,
    else the bare answer when it defines the function; None when there is no code."""
    blocks = [body for lang, body in code_blocks(answer) if lang in ("", "python", "py", "python3")]
    for body in blocks:
        if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", body):
            return body
    if blocks:
        return blocks[0]
    return answer if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", answer) else None


def program_with_tests(code: str, header: str, tests: str, entry_point: str) -> str:
    """The program the sandbox runs: the stub's imports, then the answer (after the stub itself when the answer is
    only a body), then the tests and `check(entry_point)`."""
    imports = "\n".join(line for line in header.splitlines() if line.startswith(("import ", "from ")))
    defines = re.search(rf"def\s+{re.escape(entry_point)}\s*\(", code) is not None
    body = code if defines else header + code
    return f"{imports}\n\n{body}\n\n{tests}\n\ncheck({entry_point})\n"


def has_code(answer: str) -> bool:
    """Whether the answer holds code: a fenced block, or lines that read as Python statements."""
    return bool(code_blocks(answer)) or "```" in answer or _CODE_LINE.search(answer) is not None


def mentions(answer: str, needles: list[str]) -> bool:
    """Whether any needle appears in the answer (case-insensitive; digits compared without thousands separators)."""
    text = " ".join(answer.lower().split())
    plain = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    return any(needle.lower() in text or needle.lower() in plain for needle in needles)
