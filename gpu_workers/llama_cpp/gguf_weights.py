"""The weight layout the llama.cpp engine loads: the GGUF as shipped, or its weights re-encoded once (in C, ~1 s)
into a cached copy whose matrix kernels batch better on x86.

Why re-encode (docs/engine.md has the measurements): the packaged SmolLM2 GGUF is Q4_1, and llama.cpp's x86 build
has no batched (GEMM) kernel for Q4_1: a prefill chunk or an 8-sequence decode step multiplies every weight row by
each token's activations one dot product at a time. Q8_0 has one (llamafile's tinyBLAS, AVX2), so prefill and batched
decode go faster. Q8_0 holds every Q4_1 value of a 32-weight block almost exactly (its step is ~1/8 of Q4_1's), so
the model is the same one, not a further-quantised one; the file grows from 88 to 145 MB.

`q4_0` and `iq4_nl` exist to be measured, not served (the pool table's `llama_weights` admits only `as_shipped` and
`q8_0`): llama.cpp repacks both into interleaved rows with fast AVX2 kernels for one token and for many, so they decode
faster than Q4_1 single-stream and than Q8_0 batched, but re-encoding Q4_1's 4-bit values into another 4-bit grid moves
the model (the engine bench's layout table: top-1 agreement with the shipped model ~66-72 % against ~96 %, perplexity
+20 %).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from gpu_workers.llama_cpp.gguf_tokenizer import cache_dir_for, cache_root

WeightLayout = Literal["as_shipped", "q8_0", "q4_0", "iq4_nl"]
_FTYPES = {"q8_0": 7, "q4_0": 2, "iq4_nl": 25}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0, _Q4_0, _IQ4_NL


def weights_for(gguf: Path, layout: WeightLayout) -> Path:
    """The GGUF file to load for `layout`: `gguf` itself, or its re-encoded copy in the cache (made on first use)."""
    if layout == "as_shipped":
        return gguf
    # Keyed like the tokenizer cache (name, size, first MiB): a new model version re-encodes again.
    target = cache_root() / "weights" / f"{cache_dir_for(gguf).name}-{layout}.gguf"
    if target.is_file():
        return target
    from cyllama.llama import llama_cpp as L

    L.disable_logging()
    params = L.LlamaModelQuantizeParams()
    params.ftype = _FTYPES[layout]
    params.allow_requantize = True  # the source is already quantised (Q4_1): decoded exactly, then re-encoded
    params.nthread = max(1, min(os.cpu_count() or 1, 8))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        L.model_quantize(str(gguf), staging, params)
        os.replace(staging, target)  # atomic: a crash half-way leaves no half-written file under the final name
    finally:
        Path(staging).unlink(missing_ok=True)
    return target
