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


class ChatTokenizing:
    """`tokenize_chat` and `decode` of the Engine protocol, for an engine that holds its model's tokenizer as
    `_tokenizer` (the same template and the same text for every embedded engine)."""

    _tokenizer: Any

    def tokenize_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True, continue_final: bool = False
    ) -> list[int]:
        return chat_prompt_ids(
            self._tokenizer, messages, add_generation_prompt=add_generation_prompt, continue_final=continue_final
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=True)
