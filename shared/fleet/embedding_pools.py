"""Embedding pools: the embedding models the service serves, locally (packaged files) and deployed (Modal).

A pool's name is the `model` id clients ask for (`text-embedding-minilm`), the name its workers serve under, and the
label of the gateway's embedding metrics. Embedding pools are not chat pools: no tier routes chat to them, and chat
pools never answer `/v1/embeddings`.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from shared.errors import ContextLengthExceededError, InvalidRequestError
from shared.fleet.pools import TokenPrice
from shared.wire.embeddings_api import EmbeddingRequest
from shared.wire.schemas import ModelPricing


class PackagedEmbeddingModel(BaseModel):
    """A sentence-transformers model directory shipped inside a PyPI package (nothing is downloaded at run time)."""

    package: str
    subdir: str = "model"

    def directory(self) -> Path:
        # find_spec, not import: only the files are needed, never the package's own code.
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"the package {self.package!r} (the embedding model's files) is not installed")
        return Path(spec.origin).parent / self.subdir


class DeployedEncoderModel(BaseModel):
    """The hub model `vllm serve --runner pooling` serves on a Modal GPU (gpu_workers/modal_app.py): an embedding
    model, or a re-rank pool's cross-encoder."""

    hf_repo: str
    revision: str  # a commit sha pins what serves (a hub push cannot change it)
    gpu: str
    min_containers: int = Field(ge=0)
    max_containers: int = Field(ge=1)
    scaledown_window_s: int = Field(ge=60)
    max_concurrent_inputs: int = Field(ge=1)


# How the ledger names an embedding model's entries: this prefix, then the pool (shared/storage/ledger.py).
EMBEDDING_LEDGER_PREFIX = "embedding:"


class EmbeddingPool(BaseModel):
    name: str
    description: str
    dimensions: int  # the vector length; `dimensions` must equal it (the model is not Matryoshka-trained)
    # Tokens per input, [CLS] and [SEP] included: the model's max_seq_length (sentence_bert_config.json). Its position
    # table has 512 rows, but it was trained on 256 and sentence-transformers truncates there; longer is a 400.
    max_input_tokens: int
    local: PackagedEmbeddingModel
    deployed: DeployedEncoderModel
    price: TokenPrice  # internal cost per million input tokens (completion price unused)
    list_price: ModelPricing | None = None  # what the customer pays (output unused); unset: the API shows none


@cache
def packaged_tokenizer(directory: Path):  # -> tokenizers.Tokenizer (imported lazily: the gateway's start-up)
    """The pool's own tokenizer (tokenizer.json from its package), with no truncation and no padding, so a count is
    the number of tokens the model would see, [CLS] and [SEP] included."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(pool: EmbeddingPool, texts: list[str]) -> list[int]:
    """Tokens per input under the pool's tokenizer."""
    return [len(encoding.ids) for encoding in packaged_tokenizer(pool.local.directory()).encode_batch(texts)]


def checked_inputs(pool: EmbeddingPool, request: EmbeddingRequest) -> tuple[list[str], list[int]]:
    """The request's texts and each one's token count, or the OpenAI 400 that explains what is wrong. Gateway and
    worker both call it, so a request refused by one is refused by the other (as vLLM refuses it deployed)."""
    if request.dimensions is not None and request.dimensions != pool.dimensions:
        raise InvalidRequestError(
            f"The model `{pool.name}` returns {pool.dimensions}-dimensional embeddings only; it was not trained to be "
            f"shortened (not a Matryoshka model), so `dimensions` must be {pool.dimensions} or omitted.",
            param="dimensions",
            code="invalid_value",
        )
    texts = request.texts()
    counts = count_tokens(pool, texts)
    for i, count in enumerate(counts):
        if count > pool.max_input_tokens:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {pool.max_input_tokens} tokens per input, however input "
                f"{i} has {count} tokens. Please reduce the length of the input.",
                param="input",
            )
    return texts, counts
