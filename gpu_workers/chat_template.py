"""Chat messages to prompt token ids with the model's own chat template (every embedded engine; torch-free)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def chat_prompt_ids(
    tokenizer: Any, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool, continue_final: bool
) -> list[int]:
    """The chat template's token ids. Continuing, transformers cuts the rendered chat right after the final
    message's text (its spacing kept): no end-of-turn marker, so the model goes on with that message."""
    encoded = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=add_generation_prompt, continue_final_message=continue_final
    )
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return [int(i) for i in ids]
