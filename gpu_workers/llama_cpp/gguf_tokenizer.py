"""The Hugging Face tokenizer (and chat template) of a GGUF file, for engines that do not load the model through
transformers: converted once, in a child process, into a cache folder; loaded from there without torch.

Why a child process: transformers' GGUF reader imports torch (~300 MB resident), while a saved fast tokenizer loads
with `tokenizers` alone. The worker keeps only the small one. The conversion is the same transformers code the
transformers engine runs, so both engines render and tokenize chats identically.

Run directly: `python -m gpu_workers.llama_cpp.gguf_tokenizer MODEL.gguf OUT_DIR`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TOKENIZER_FILE = "tokenizer.json"


def cache_root() -> Path:
    """`$FLEETCHAT_CACHE_DIR`, else the user's cache folder (XDG)."""
    explicit = os.environ.get("FLEETCHAT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fleetchat"


def cache_dir_for(gguf: Path) -> Path:
    """One folder per GGUF content (its name, size and first MiB): a new model version converts again."""
    digest = hashlib.sha256()
    digest.update(f"{gguf.name}:{gguf.stat().st_size}".encode())
    with gguf.open("rb") as f:
        digest.update(f.read(1 << 20))
    return cache_root() / "tokenizers" / f"{gguf.stem}-{digest.hexdigest()[:16]}"


def load_tokenizer(gguf: Path, *, timeout_s: float = 300.0) -> Any:
    """The tokenizer of `gguf` as a `PreTrainedTokenizerFast` (converting it first if the cache lacks it)."""
    from transformers import PreTrainedTokenizerFast

    folder = cache_dir_for(gguf)
    if not (folder / TOKENIZER_FILE).is_file():
        convert_in_child(gguf, folder, timeout_s=timeout_s)
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def convert_in_child(gguf: Path, folder: Path, *, timeout_s: float) -> None:
    subprocess.run(
        [sys.executable, "-m", "gpu_workers.llama_cpp.gguf_tokenizer", str(gguf), str(folder)],
        check=True,
        timeout=timeout_s,
        stdout=subprocess.DEVNULL,
    )


def convert(gguf: Path, folder: Path) -> None:
    """Write the tokenizer files into `folder` atomically (a crash half-way leaves no half-written cache)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tokenizer.save_pretrained(str(staging))
        try:
            staging.rename(folder)
        except OSError:  # another worker converted it meanwhile: theirs is as good
            if not (folder / TOKENIZER_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
