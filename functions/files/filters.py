"""OpenAI's search filters applied to the attributes a file was attached with (`attributes` on a vector store file).

Semantics (OpenAI documents the operators, not the corner cases; these are ours, in docs/files.md):
- a file without the attribute matches no comparison, `ne` and `nin` included (a filter names what it wants);
- values compare within their kind: strings with strings (exactly, case-sensitive), booleans with booleans, numbers
  with numbers (an int and a float are both numbers; a boolean is never a number);
- `ne` and `nin` hold for a value of another kind (it is not equal); `gt`/`gte`/`lt`/`lte` need a number on both
  sides; `and` / `or` combine as usual.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.wire.files_api import ComparisonFilter, CompoundFilter, Filter

Value = str | int | float | bool


def _kind(value: Value) -> str:
    return "bool" if isinstance(value, bool) else "number" if isinstance(value, int | float) else "str"


def _equal(a: Value, b: Value) -> bool:
    return _kind(a) == _kind(b) and a == b


def _compare(node: ComparisonFilter, attributes: Mapping[str, Value]) -> bool:
    if node.key not in attributes:
        return False
    have, want = attributes[node.key], node.value
    match node.type:
        case "eq":
            return _equal(have, want)  # type: ignore[arg-type]
        case "ne":
            return not _equal(have, want)  # type: ignore[arg-type]
        case "in":
            return any(_equal(have, v) for v in want)  # type: ignore[union-attr]
        case "nin":
            return not any(_equal(have, v) for v in want)  # type: ignore[union-attr]
    if _kind(have) != "number" or _kind(want) != "number":  # type: ignore[arg-type]
        return False
    a, b = float(have), float(want)  # type: ignore[arg-type]
    return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[node.type]


def matches(node: Filter | None, attributes: Mapping[str, Value] | None) -> bool:
    """Whether a file with these attributes passes the filter (no filter: every file)."""
    if node is None:
        return True
    attributes = attributes or {}
    if isinstance(node, CompoundFilter):
        results = (matches(child, attributes) for child in node.filters)
        return all(results) if node.type == "and" else any(results)
    return _compare(node, attributes)
