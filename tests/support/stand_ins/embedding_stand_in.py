"""A stand-in embedding worker speaking `/v1/embeddings` (OpenAI's protocol) for tests where the model is not the
point: each text's vector is its hashed bag of words (384 dimensions, L2-normalised), so texts sharing words are
near and a keyword query finds its passage. `delay_s` holds each answer (ingestion caught mid-way); `calls` counts
the requests answered, `inputs` the texts embedded; `broken` answers without embeddings."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI

DIMENSIONS = 384
_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words(text: str) -> np.ndarray:
    vector = np.zeros(DIMENSIONS, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        vector[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMENSIONS] += 1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm else vector


@dataclass
class EmbeddingStandIn:
    delay_s: float = 0.0
    broken: bool = False  # answer without embeddings (the gateway must not accept it)
    calls: int = 0
    inputs: list[str] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/embeddings")
        async def embeddings(body: dict) -> dict:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
            self.calls += 1
            if self.broken:
                return {"object": "list", "data": [], "model": body["model"], "usage": {"prompt_tokens": 0}}
            self.inputs.extend(texts)
            data = []
            for i, text in enumerate(texts):
                vector = bag_of_words(text)
                value = (
                    base64.b64encode(vector.astype("<f4").tobytes()).decode()
                    if body.get("encoding_format") == "base64"
                    else vector.tolist()
                )
                data.append({"object": "embedding", "index": i, "embedding": value})
            tokens = sum(len(text.split()) for text in texts)
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            return {"object": "list", "data": data, "model": body["model"], "usage": usage}

        @app.get("/health")
        async def health() -> dict:
            return {"status": "ok"}

        return app
