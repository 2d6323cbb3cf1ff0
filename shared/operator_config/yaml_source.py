"""Read a YAML file into plain data plus the line of every key and list item (PyYAML's node marks), refusing
duplicate keys, which PyYAML alone silently resolves to the last one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared.operator_config.issues import ConfigError, ConfigIssue, Loc, dotted


def read_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """(data, lines): lines maps a key path such as ("tiers", "free", "pools", 0) to its 1-based line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(file=str(path), line=None, field="", reason=f"cannot read: {exc}")]) from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = f"not valid YAML: {exc.problem or exc.context}"
        raise ConfigError([ConfigIssue(file=str(path), line=line, field="", reason=reason)]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue(file=str(path), line=None, field="", reason=f"not valid YAML: {exc}")]) from exc
    if node is None:  # an empty file: every section keeps its built-in table
        return {}, {}
    lines: dict[Loc, int] = {}
    issues: list[ConfigIssue] = []
    _walk(node, (), lines, issues, str(path))
    if issues:
        raise ConfigError(issues)
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node), lines
    except yaml.YAMLError as exc:  # e.g. a bad !!timestamp
        raise ConfigError([ConfigIssue(file=str(path), line=None, field="", reason=f"not valid YAML: {exc}")]) from exc
    finally:
        loader.dispose()


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], issues: list[ConfigIssue], file: str) -> None:
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            here, line = (*loc, key), key_node.start_mark.line + 1
            if key in first_seen and key != "<<":
                reason = f"duplicate key {key!r} (first on line {first_seen[key]}): a name may appear once"
                issues.append(ConfigIssue(file=file, line=line, field=dotted(here), reason=reason))
                continue
            first_seen[key] = line
            lines[here] = line
            _walk(value_node, here, lines, issues, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            _walk(item, (*loc, index), lines, issues, file)
