"""Extract the response schemas fleetchat answers with from OpenAI's published OpenAPI description (the public
`openai/openai-openapi` repository's `openapi.json`, pinned by commit), with every schema they reference, into one
small JSON file the contract test validates real responses against (tests/contracts/openai_schemas.json).

    python -m functions.offline.contracts.openai_schemas OPENAPI_JSON COMMIT [OUT]

The file keeps OpenAI's layout (`components.schemas`), so its `$ref`s resolve unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SOURCE = "https://github.com/openai/openai-openapi"
LICENCE = "MIT (Copyright (c) OpenAI)"
DEFAULT_OUT = Path(__file__).parents[3] / "tests" / "contracts" / "openai_schemas.json"
# The bodies fleetchat sends on endpoints OpenAI's description covers.
ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "CreateModerationResponse",
    "ListModelsResponse",
    "Model",
    "ErrorResponse",
    "Response",
    "ResponseStreamEvent",
    "ResponseItemList",
    "Batch",
    "ListBatchesResponse",
    "OpenAIFile",
)
_PREFIX = "#/components/schemas/"


def referenced(node: Any) -> set[str]:
    """The schema names `node` refers to with `$ref`, anywhere inside it."""
    if isinstance(node, dict):
        names = {node["$ref"].removeprefix(_PREFIX)} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            names |= referenced(value)
        return names
    if isinstance(node, list):
        return set().union(*(referenced(item) for item in node)) if node else set()
    return set()


def extract(spec: dict[str, Any], roots: tuple[str, ...] = ROOTS) -> dict[str, Any]:
    """The roots and their closure under `$ref`, in OpenAI's own layout."""
    schemas = spec["components"]["schemas"]
    wanted: dict[str, Any] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted[name] = schemas[name]
        pending += sorted(referenced(schemas[name]) - wanted.keys())
    return {"components": {"schemas": dict(sorted(wanted.items()))}}


def main(argv: list[str]) -> None:
    spec_path, commit = Path(argv[0]), argv[1]
    out = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    document = {
        "source": f"{SOURCE} openapi.json at {commit} (OpenAPI {spec['openapi']}, API {spec['info']['version']})",
        "licence": LICENCE,
        "roots": list(ROOTS),
        **extract(spec),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
