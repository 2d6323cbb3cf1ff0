"""Chat messages to prompt token ids with the model's own chat template (every embedded engine; torch-free)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

# SentencePiece's byte-fallback pieces (`<0xE2>`) and its word-start marker.
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"


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

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Plain text to token ids, with the special tokens the tokenizer adds itself (as vLLM's completions do)."""
        return [int(t) for t in self._tokenizer.encode(text, add_special_tokens=add_special_tokens)]

    def tokenizer_info(self) -> dict[str, Any]:
        """vLLM's `/tokenizer_info` fields: the tokenizer's class, special tokens and chat template."""
        t = self._tokenizer
        return {
            "tokenizer_class": type(t).__name__,
            "eos_token": t.eos_token,
            "bos_token": t.bos_token,
            "pad_token": t.pad_token,
            "chat_template": t.chat_template if isinstance(t.chat_template, str) else None,
        }

    def token_strs(self, token_ids: Sequence[int]) -> list[str]:
        """Each token's piece as the tokenizer writes it (byte-level symbols included), as vLLM's `/tokenize` returns
        them with `return_token_strs`."""
        return [str(piece) for piece in self._tokenizer.convert_ids_to_tokens([int(t) for t in token_ids])]

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes: a byte-level BPE piece mapped back through GPT-2's byte alphabet (so half of a UTF-8
        character stays half), a SentencePiece byte piece as its byte, anything else (special tokens) as UTF-8."""
        piece = self._tokenizer.convert_ids_to_tokens(int(token_id))
        if piece is None:
            return b""
        if int(token_id) in self._tokenizer.all_special_ids:
            return piece.encode()
        if (byte := _BYTE_PIECE.fullmatch(piece)) is not None:
            return bytes([int(byte.group(1), 16)])
        alphabet = _byte_level_alphabet()
        if all(ch in alphabet for ch in piece):
            return bytes(alphabet[ch] for ch in piece)
        return piece.replace(_SPIECE_SPACE, " ").encode()


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, reversed (the table byte-level BPE vocabularies are written in)."""
    from gguf.vocab import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}
