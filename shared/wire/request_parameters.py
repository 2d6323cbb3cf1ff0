"""Chat-completions parameters beyond the declared fields: which are known, and which no pool can honour. A parameter
that cannot be honoured is refused with a 400 naming it, never dropped (docs/api-parameters.md).

Two kinds of undeclared parameter:
- honoured by no pool (the legacy `functions`, audio output, predicted outputs, ...): the gateway refuses them at any
  value other than their no-op one (`refuse_unknown_or_unhonoured`);
- unknown names: refused as OpenAI refuses them ("Unrecognized request argument supplied").

The sampling parameters every pool honours (`logprobs`, penalties, `logit_bias`, vLLM's `top_k`, `min_p`, ...) are
declared fields (shared/wire/sampling_api.py), validated like the rest.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shared.errors import InvalidRequestError

# Value sets that change nothing: a parameter set to one of these is accepted anywhere.
_EMPTY: tuple[Any, ...] = (None, {}, [])

# OpenAI parameters no fleetchat pool honours (text chat models only; tools replace the legacy `functions`).
UNHONOURED: dict[str, tuple[Any, ...]] = {
    "functions": _EMPTY,
    "function_call": (None, "none"),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "web_search_options": (None,),
    "verbosity": (None,),
    "metadata": _EMPTY,  # OpenAI keeps it with stored completions; fleetchat's stored conversations have no such field
    "service_tier": (None, "auto", "default"),
}

# Accepted and honoured: `safety_identifier` identifies the end user as `user` does (never sent to a model);
# `prompt_cache_key` keeps requests that share it on one replica, where their prefix cache is (routers/chat.py).
HINTS = frozenset({"safety_identifier", "prompt_cache_key"})

# Extension fields read from a request's extra fields by the gateway's own layers.
FLEETCHAT_EXTENSIONS = frozenset({"server_tools"})

_KNOWN_EXTRA = frozenset(UNHONOURED) | HINTS | FLEETCHAT_EXTENSIONS


def _extra(request: BaseModel) -> dict[str, Any]:
    return dict(request.model_extra or {})


def _is_no_op(value: Any, no_op: tuple[Any, ...]) -> bool:
    # A bool is an int to Python: `True` must not pass for 1, nor 0 for `False`.
    return any(value == allowed and isinstance(value, bool) == isinstance(allowed, bool) for allowed in no_op)


def refuse_unknown_or_unhonoured(request: BaseModel) -> None:
    """The gateway's check: an unknown parameter, or one no pool honours set to anything but its no-op value, is a
    400 naming it."""
    for name, value in _extra(request).items():
        if name not in _KNOWN_EXTRA:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {name}", param=name)
        if name in UNHONOURED and not _is_no_op(value, UNHONOURED[name]):
            raise InvalidRequestError(
                f"'{name}' is not supported by fleetchat's models: {_why_unhonoured(name)}",
                param=name,
                code="unsupported_parameter",
            )


def _why_unhonoured(name: str) -> str:
    if name in ("functions", "function_call"):
        return "use `tools` and `tool_choice` instead."
    return "leave it unset."
