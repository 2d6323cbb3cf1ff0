"""What a `response_format` asks of an answer: the JSON schema, checked up front (a bad or, in strict mode, an
unenforceable schema is a 400 with `param`) and checked against the final answer (docs/structured-outputs.md).

Both sides import it: the gateway (functions/chat/structured_output.py) and the local worker
(gpu_workers/server/chat_serving.py), whose grammar engine, llguidance, compiles the same schema into a token mask
(gpu_workers/transformers_engine/structured_decoding.py).

Example::

    contract = OutputContract.of(request.response_format)  # None for text; raises InvalidRequestError
    if contract is not None and (problem := contract.problem(answer_text)) is not None:
        ...  # not valid JSON, or it does not validate
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import jsonschema
import llguidance
from jsonschema.exceptions import SchemaError

from shared.errors import InvalidRequestError
from shared.wire.schemas import ResponseFormat

# `json_object` mode: any JSON object (OpenAI's and vLLM's meaning).
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
SCHEMA_PARAM = "response_format.json_schema.schema"

# How the grammar spells JSON: json.dumps' separators and no other whitespace. Flexible whitespace lets a small
# model run away in newlines and indentation until max_tokens; a fixed spelling costs nothing (any JSON value still
# has one) and ends sooner. A schema may override it under "x-guidance".
GRAMMAR_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

Kind = Literal["json_object", "json_schema"]


class GrammarError(ValueError):
    """The grammar engine cannot compile (strict: cannot fully enforce) this schema."""


def compile_grammar(schema: dict[str, Any], *, lenient: bool) -> str:
    """The llguidance grammar for `schema`. `lenient` ignores keywords llguidance does not implement (the answer is
    still validated in full afterwards); strict refuses them, since the grammar could not guarantee them."""
    return _compiled(json.dumps(schema), lenient)  # key order kept: it is the order properties are written in


@lru_cache(maxsize=256)  # clients repeat their schemas; the gateway and the worker each check every request's
def _compiled(schema_json: str, lenient: bool) -> str:
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema_json, defaults=GRAMMAR_DEFAULTS, overrides={"lenient": lenient}
        )
    except ValueError as exc:
        raise GrammarError(str(exc)) from exc
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise GrammarError("; ".join(messages))
    return grammar


@dataclass(frozen=True)
class OutputContract:
    kind: Kind
    schema: dict[str, Any]
    strict: bool

    @classmethod
    def of(cls, response_format: ResponseFormat | None) -> OutputContract | None:
        """The contract a request's `response_format` sets (None for none or `text`); raises `InvalidRequestError`
        (with `param`) for a schema that is not a valid JSON schema, or that strict mode cannot enforce."""
        if response_format is None or response_format.type == "text":
            return None
        if response_format.type == "json_object":
            return cls("json_object", JSON_OBJECT_SCHEMA, strict=False)
        spec = response_format.json_schema
        assert spec is not None  # the model validator pairs the type with its object
        schema, strict = spec.schema_, bool(spec.strict)
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except SchemaError as exc:
            raise InvalidRequestError(
                f"Invalid schema for response_format '{spec.name}': {exc.message}", param=SCHEMA_PARAM
            ) from exc
        try:
            compile_grammar(schema, lenient=not strict)
        except GrammarError as exc:
            hint = " (strict mode enforces every keyword; set strict to false to have it validated instead)"
            raise InvalidRequestError(
                f"response_format '{spec.name}' cannot be enforced: {exc}{hint if strict else ''}",
                param=SCHEMA_PARAM,
            ) from exc
        return cls("json_schema", schema, strict)

    def problem(self, text: str) -> str | None:
        """Why `text` does not satisfy the contract, or None when it does."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"the answer is not valid JSON ({exc.msg} at character {exc.pos})"
        validator_class = jsonschema.validators.validator_for(self.schema)
        validator = validator_class(self.schema, format_checker=validator_class.FORMAT_CHECKER)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        return f"the answer does not match the schema at {where}: {error.message}"
