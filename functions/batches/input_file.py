"""A batch's input file, read and checked: one request per JSONL line, each a `BatchInputLine` to the batch's
endpoint, `custom_id`s unique, one model throughout, at most `max_lines` lines. Problems are OpenAI's batch errors,
with the line number (1-based) where there is one; a batch with any problem fails before a line runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from shared.wire.batches_api import BatchError, BatchInputLine

MAX_REPORTED_ERRORS = 20  # a file with thousands of bad lines reports the first few


@dataclass
class ReadInput:
    lines: list[BatchInputLine] = field(default_factory=list)
    errors: list[BatchError] = field(default_factory=list)
    model: str | None = None


def _problem(error: ValidationError) -> tuple[str, str | None]:
    first = error.errors()[0]
    param = ".".join(str(part) for part in first.get("loc", ())) or None
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized field in the line: {param}", param
    if first.get("type") == "missing":
        return f"Missing required field: {param}", param
    return f"Invalid value for '{param}': {first.get('msg', 'invalid value')}", param


def read_input(body: bytes, endpoint: str, *, max_lines: int) -> ReadInput:
    found = ReadInput()

    def error(code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        if len(found.errors) < MAX_REPORTED_ERRORS:
            found.errors.append(BatchError(code=code, message=message, line=line, param=param))

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        error("invalid_json_line", "The input file is not UTF-8 text.")
        return found
    seen: set[str] = set()
    models: set[str] = set()
    raw_lines = [line for line in text.splitlines()]
    numbered = [(number, line) for number, line in enumerate(raw_lines, start=1) if line.strip()]
    if not numbered:
        error("empty_file", "The input file has no requests.")
        return found
    if len(numbered) > max_lines:
        error("too_many_requests", f"The input file has {len(numbered)} requests; a batch takes at most {max_lines}.")
        return found
    for number, line in numbered:
        try:
            request = BatchInputLine.model_validate(json.loads(line))
        except json.JSONDecodeError:
            error("invalid_json_line", "This line is not valid JSON.", number)
            continue
        except ValidationError as exc:
            message, param = _problem(exc)
            code = "invalid_url" if param == "url" else "invalid_request"
            error(code, message, number, param)
            continue
        if request.url != endpoint:
            error(
                "mismatched_endpoint",
                f"The line's url {request.url} is not the batch's endpoint {endpoint}.",
                number,
                "url",
            )
            continue
        if request.custom_id in seen:
            error(
                "duplicate_custom_id",
                f"The custom_id {request.custom_id!r} appears more than once.",
                number,
                "custom_id",
            )
            continue
        seen.add(request.custom_id)
        model = request.body.get("model")
        if isinstance(model, str):
            models.add(model)
        found.lines.append(request)
    if len(models) > 1:
        error(
            "mismatched_model", f"A batch's requests name one model; this file names {len(models)}: {sorted(models)}."
        )
    if not found.errors:
        found.model = next(iter(models), None)
    return found
