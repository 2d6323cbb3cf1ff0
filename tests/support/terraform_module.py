"""infra/terraform read offline: every .tf file parsed with python-hcl2 and merged into one module, with small lookups
for the tests that compare it with the code (tests/unit/deploy/test_terraform*.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]
TF_DIR = REPO_ROOT / "infra" / "terraform"
# `#checkov:skip=CKV_..:reason`, inside the block it exempts (checkov's own syntax).
CHECKOV_SKIP = re.compile(r"#\s*checkov:skip=(?P<check>CKV2?_[A-Z0-9]+_\d+)(?::(?P<reason>.*))?")


def _load(path: Path) -> dict[str, Any]:
    if hasattr(hcl2, "SerializationOptions"):  # python-hcl2 >= 8 quotes strings unless told not to
        options = hcl2.SerializationOptions(
            with_comments=False, explicit_blocks=False, strip_string_quotes=True, preserve_heredocs=False
        )
        return hcl2.loads(path.read_text(), serialization_options=options)
    return hcl2.loads(path.read_text())


def _module() -> dict[str, dict[str, Any]]:
    """Every .tf file merged: {"resource": {"type.name": body}, "data": ..., "variable": {name: body}, "output": ...,
    "locals": {name: expression}, "other": {"terraform": [...], "provider": [...]}}."""
    merged: dict[str, dict[str, Any]] = {"resource": {}, "data": {}, "variable": {}, "output": {}, "locals": {}}
    other: dict[str, list[Any]] = {}
    for path in sorted(TF_DIR.glob("*.tf")):
        for kind, blocks in _load(path).items():
            for block in blocks:
                if kind in ("resource", "data"):
                    for type_, named in block.items():
                        merged[kind].update({f"{type_}.{name}": body for name, body in named.items()})
                elif kind in merged:
                    merged[kind].update(block)
                else:
                    other.setdefault(kind, []).append(block)
    return {**merged, "other": other}


MODULE = _module()


def resource(address: str) -> dict[str, Any]:
    assert address in MODULE["resource"], f"infra/terraform has no resource {address}"
    return MODULE["resource"][address]


def one_block(body: dict[str, Any], name: str) -> dict[str, Any]:
    blocks = body.get(name, [])
    assert len(blocks) == 1, f"expected exactly one {name} block, got {blocks!r}"
    return blocks[0]


def variable_default(name: str) -> Any:
    return MODULE["variable"][name].get("default")


def policy_statements(address: str) -> list[dict[str, Any]]:
    return MODULE["data"][address]["statement"]


def checkov_skips() -> dict[tuple[str, str], str]:
    """(block address, check id) -> the reason written beside the skip, from every .tf file."""
    skips: dict[tuple[str, str], str] = {}
    for path in sorted(TF_DIR.glob("*.tf")):
        block = None
        for line in path.read_text().splitlines():
            if opened := re.match(r'(resource|data)\s+"(\w+)"\s+"(\w+)"', line):
                kind, type_, name = opened.groups()
                block = f"{type_}.{name}" if kind == "resource" else f"data.{type_}.{name}"
            if skip := CHECKOV_SKIP.search(line):
                assert block, f"{path.name}: a checkov skip outside any block: {line.strip()}"
                skips[(block, skip["check"])] = (skip["reason"] or "").strip()
    return skips


def modal_sub(
    *,
    workspace: str = "ac-12345abcd",
    environment: str = "main",
    app: str = "fleetchat",
    function: str = "gateway",
    container: str = "ta-01JABCDEF",
) -> str:
    """The `sub` claim of a Modal identity token, in the documented shape (modal.com/docs/guide/oidc-integration)."""
    return (
        f"modal:workspace_id:{workspace}:environment_name:{environment}:app_name:{app}"
        f":function_name:{function}:container_id:{container}"
    )


def string_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` is any run of characters, `?` one character, everything else literal."""
    regex = "".join({"*": ".*", "?": "."}.get(char, re.escape(char)) for char in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def trusted(patterns: str | list[str], sub: str) -> bool:
    """Whether a StringLike condition with these values (any of them) lets this `sub` through."""
    return any(string_like(p, sub) for p in ([patterns] if isinstance(patterns, str) else patterns))
