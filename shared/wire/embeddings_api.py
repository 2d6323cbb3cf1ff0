"""Wire models of `POST /v1/embeddings` (OpenAI-compatible), shared by the gateway and the embedding workers.

`input` is a string or a list of strings (one embedding each, in order). OpenAI also takes token arrays (a list of
ints, or a list of them); those are tiktoken ids for OpenAI's models, and clients such as LangChain send them by
default, so a worker that fed them to MiniLM would return confident garbage: they are refused with a 400 instead.
`encoding_format` is `float` (a JSON list) or `base64` (the little-endian float32 bytes, what the openai SDK asks for
and decodes with numpy). Limits, as OpenAI's: at most `MAX_INPUTS` inputs, none empty, each within the model's token
limit (checked where the tokenizer is: `functions/embedding_service.py`, and again in the worker).
"""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from shared.errors import InvalidRequestError

MAX_INPUTS = 2048  # OpenAI's limit per request
EncodingFormat = Literal["float", "base64"]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown field is a 400 naming it, as OpenAI answers

    # Strict types: a number is not silently read as a string, nor a string as a token id.
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    model: str = Field(max_length=256)
    encoding_format: EncodingFormat = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = Field(default=None, max_length=256)

    def texts(self) -> list[str]:
        """The inputs to embed, in order; raises 400 (token arrays, empty input, too many inputs)."""
        if isinstance(self.input, str):
            texts = [self.input]
        elif all(isinstance(item, str) for item in self.input):
            texts = [item for item in self.input if isinstance(item, str)]
        else:
            raise InvalidRequestError(
                "Token arrays are not accepted: this model uses its own tokenizer (WordPiece), not tiktoken. "
                "Send the text as a string or a list of strings (in LangChain: check_embedding_ctx_length=False).",
                param="input",
                code="invalid_value",
            )
        if not texts:
            raise InvalidRequestError("'input' must not be an empty list.", param="input", code="invalid_value")
        if len(texts) > MAX_INPUTS:
            raise InvalidRequestError(
                f"'input' has {len(texts)} items; at most {MAX_INPUTS} are accepted per request.",
                param="input",
                code="invalid_value",
            )
        for i, text in enumerate(texts):
            if not text:
                raise InvalidRequestError(
                    f"'input' item {i} is an empty string; every input must have text.",
                    param="input",
                    code="invalid_value",
                )
        return texts


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # a list of floats, or base64 of little-endian float32


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


def encode_vector(vector: np.ndarray, encoding_format: EncodingFormat) -> list[float] | str:
    """One embedding in the requested format: base64 is the raw little-endian float32 bytes (OpenAI's wire format)."""
    as_float32 = np.asarray(vector, dtype="<f4")
    if encoding_format == "base64":
        return base64.b64encode(as_float32.tobytes()).decode("ascii")
    return as_float32.astype(float).tolist()


def decode_vector(value: list[float] | str) -> np.ndarray:
    """The float32 vector of one wire embedding, whichever format it came in."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float32)
