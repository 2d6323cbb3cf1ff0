"""Wire models of `POST /v1/moderations` (OpenAI-compatible) and the limits on what it accepts.

`input` is a string, a list of strings (one result each), or a list of multimodal parts (one result for all of them,
as OpenAI's omni-moderation does); only text parts are accepted. Limits: at most `MAX_INPUTS` inputs, each at most
`MAX_INPUT_CHARS` characters (more is 413), none empty; the request body is also bounded by `max_body_bytes`.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidRequestError, PayloadTooLargeError

MAX_INPUTS = 32
MAX_INPUT_CHARS = 32_768
InputType = Literal["text", "image"]


class TextInput(BaseModel):
    type: Literal["text"]
    text: str


class ImageUrlInput(BaseModel):
    type: Literal["image_url"]
    image_url: dict[str, Any]


MultiModalInput = Annotated[TextInput | ImageUrlInput, Field(discriminator="type")]


class ModerationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown field is a 400 naming it, as OpenAI answers

    input: str | list[str] | list[MultiModalInput]
    model: str | None = Field(default=None, max_length=256)

    def texts(self) -> list[str]:
        """The inputs to judge, one result each; raises 400 (empty, too many, an image) or 413 (too long)."""
        if isinstance(self.input, str):
            texts = [self.input]
        elif all(isinstance(item, str) for item in self.input):
            texts = [item for item in self.input if isinstance(item, str)]
        else:
            parts = [item for item in self.input if not isinstance(item, str)]
            if any(isinstance(part, ImageUrlInput) for part in parts):
                raise InvalidRequestError(
                    "Image inputs are not supported by this moderation model; send text parts only.",
                    param="input",
                    code="invalid_value",
                )
            texts = ["\n".join(part.text for part in parts if isinstance(part, TextInput))]
        if not texts:
            raise InvalidRequestError("'input' must not be an empty list.", param="input", code="invalid_value")
        if len(texts) > MAX_INPUTS:
            raise InvalidRequestError(
                f"'input' has {len(texts)} items; at most {MAX_INPUTS} are accepted per request.",
                param="input",
                code="invalid_value",
            )
        for i, text in enumerate(texts):
            if not text.strip():
                raise InvalidRequestError(f"Input {i} is empty.", param="input", code="invalid_value")
            if len(text) > MAX_INPUT_CHARS:
                raise PayloadTooLargeError(
                    f"Input {i} has {len(text)} characters; at most {MAX_INPUT_CHARS} are accepted per input.",
                    param="input",
                )
        return texts


class ModerationObject(BaseModel):
    flagged: bool
    categories: dict[str, bool]
    category_scores: dict[str, float]
    category_applied_input_types: dict[str, list[InputType]]


class ModerationResponse(BaseModel):
    id: str = Field(default_factory=lambda: f"modr-{uuid.uuid4().hex}")
    model: str
    results: list[ModerationObject]
