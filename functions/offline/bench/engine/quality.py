"""How far each llama.cpp weight layout's model is from the shipped model itself, read on public text.

The reference is the shipped GGUF dequantised to fp32 by transformers (the Q4_1 values exactly, fp32 arithmetic).
Each layout (`gpu_workers/llama_cpp/gguf_weights.py`: the file as shipped, or re-encoded) is run by llama.cpp over the
same tokens, and every position's next-token distribution is compared with the reference's: the share of positions whose
most likely token is the reference's (top-1 agreement), the mean KL divergence from the reference, and each one's
perplexity on the text. Greedy parity (`engine_measure.parity`) says whether whole answers are identical, which a
single differing token anywhere ends; these say how much the distributions moved, position by position.

The text: CNN/DailyMail articles (Apache-2.0, `functions/offline/safety_training/data/public/cnn-dailymail.jsonl.gz`,
the articles only, not the instruction in front of them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ARTICLES = 4
TOKENS_PER_ARTICLE = 256


def quality_text(articles: int = ARTICLES) -> list[str]:
    """The first `articles` CNN/DailyMail articles of the public safety data, as their text."""
    from functions.offline.safety_training.labelled_data import public_examples

    texts = []
    for example in public_examples("cnn-dailymail")[:articles]:
        content = example.messages[-1].content
        texts.append(content.split("\n", 1)[-1].strip())  # drop the instruction line in front of the article
    return texts


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def load_gguf_model(gguf: Path) -> tuple[Any, Any]:
    """A GGUF file's model and tokenizer through transformers (fp32 on a CPU, bf16 on a GPU: `model_loader`)."""
    from gpu_workers.model_loader import ModelSource, load_model_and_tokenizer

    return load_model_and_tokenizer(
        ModelSource(path_or_repo=str(gguf.parent), gguf_file=gguf.name), show_progress=False
    )


def model_logprobs(model: Any, token_rows: list[list[int]]) -> list[np.ndarray]:
    """A transformers model's next-token log-probabilities at every position of each row."""
    import torch

    out = []
    with torch.inference_mode():
        for row in token_rows:
            logits = model(torch.tensor([row])).logits[0].float().numpy()
            out.append(_log_softmax(logits))
    return out


def fp8_round_trip(model: Any, *, per_channel: bool = False) -> int:
    """Round every linear layer's weight but the output head's through float8 e4m3, with one scale per tensor (vLLM's
    dynamic fp8) or per output channel; returns how many layers were rounded. Activations stay as they are."""
    import torch

    rounded = 0
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    with torch.no_grad():
        for module in model.modules():
            # vLLM keeps the output head (often tied to the input embeddings) in the model's dtype.
            if isinstance(module, torch.nn.Linear) and module is not head:
                weight = module.weight
                peak = weight.abs().amax(dim=1, keepdim=True) if per_channel else weight.abs().max()
                scale = peak.float().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
                fp8 = (weight.float() / scale).to(torch.float8_e4m3fn)
                weight.copy_((fp8.float() * scale).to(weight.dtype))
                rounded += 1
    return rounded


def fp8_distances(model: Any, token_rows: list[list[int]], reference: list[np.ndarray]) -> dict[str, dict[str, Any]]:
    """vLLM's `--quantization fp8` emulated on the shipped model: copies of its weights rounded through e4m3
    (per-tensor scales, as vLLM's dynamic fp8; and per output channel), fp32 arithmetic, compared with the unrounded
    reference (`model` itself is left as it is)."""
    import copy

    rows = {}
    for scales in ("per_tensor", "per_channel"):
        rounded = copy.deepcopy(model)
        fp8_round_trip(rounded, per_channel=scales == "per_channel")
        rows[f"fp8 weights, {scales.replace('_', '-')} (vLLM)"] = {
            "size_mb": None,
            "single_tok_s": None,
            "batched_tok_s": None,
            **compare(reference, model_logprobs(rounded, token_rows), token_rows),
        }
    return rows


def llama_logprobs(gguf: Path, token_rows: list[list[int]], threads: int) -> list[np.ndarray]:
    """llama.cpp on `gguf`, every position's next-token log-probabilities (one sequence per row, from position 0)."""
    from functions.offline.bench.engine.peer import _Peer

    out = []
    with _Peer(gguf, threads, sequences=1, n_ctx=2048, n_batch=512) as peer:
        for row in token_rows:
            peer.ctx.kv_cache_clear()
            peer.batch.clear()
            for position, token in enumerate(row):
                peer.batch.add(token, position, [0], True)
            peer.ctx.decode(peer.batch)
            logits = np.asarray([peer.ctx.get_logits_ith(i) for i in range(len(row))], np.float32)
            out.append(_log_softmax(logits))
    return out


def compare(reference: list[np.ndarray], candidate: list[np.ndarray], token_rows: list[list[int]]) -> dict[str, Any]:
    """Top-1 agreement, mean KL(reference || candidate) in nats, and both perplexities, over every position."""
    agree = kl = positions = 0.0
    ref_nll = cand_nll = 0.0
    for ref, cand, row in zip(reference, candidate, token_rows, strict=True):
        agree += float((ref.argmax(axis=-1) == cand.argmax(axis=-1)).sum())
        kl += float((np.exp(ref) * (ref - cand)).sum())
        following = np.asarray(row[1:])
        ref_nll -= float(ref[np.arange(len(following)), following].sum())
        cand_nll -= float(cand[np.arange(len(following)), following].sum())
        positions += len(row)
    scored = sum(len(row) - 1 for row in token_rows)
    return {
        "positions": int(positions),
        "top1_agreement": agree / positions,
        "mean_kl_nats": kl / positions,
        "reference_perplexity": float(np.exp(ref_nll / scored)),
        "perplexity": float(np.exp(cand_nll / scored)),
    }


def layout_table(
    gguf: Path, prompt: list[int], prompts: list[list[int]], max_tokens: int, threads: int
) -> dict[str, dict[str, Any]]:
    """Per weight layout: llama.cpp's own single-stream and batched speed on it (the peer's loops) and its distance
    from the fp32 reference on the same public text. Which layout may serve is the pool table's choice
    (`LocalModel.llama_weights`): this is what that choice trades."""
    from typing import get_args

    from functions.offline.bench.engine.peer import peer_batched, peer_single_stream
    from gpu_workers.llama_cpp.gguf_tokenizer import load_tokenizer
    from gpu_workers.llama_cpp.gguf_weights import WeightLayout, weights_for

    tokenizer = load_tokenizer(gguf)
    rows = [tokenizer.encode(text)[:TOKENS_PER_ARTICLE] for text in quality_text()]
    model, _ = load_gguf_model(gguf)  # the fp32 reference, loaded once
    reference = model_logprobs(model, rows)
    table: dict[str, dict[str, Any]] = {}
    for layout in get_args(WeightLayout):
        weights = weights_for(gguf, layout)
        batched = peer_batched(weights, prompts, max_tokens, threads)
        table[layout] = {
            "size_mb": weights.stat().st_size / 1e6,
            "single_tok_s": peer_single_stream(weights, prompt, max_tokens, threads)[0],
            "batched_tok_s": batched["aggregate_tok_s"] if batched else None,
            **compare(reference, llama_logprobs(weights, rows, threads), rows),
        }
    return {**table, **fp8_distances(model, rows, reference)}


def layout_rows(table: dict[str, dict[str, Any]], served: str) -> list[str]:
    """The report's table of weight layouts (empty when not measured)."""
    if not table:
        return []
    if "error" in table:
        return ["", f"Weight layouts: not measured ({table['error']})."]
    any_row = next(iter(table.values()))
    lines = [
        "",
        f"Weight layouts, llama.cpp itself on each (the peer's loops), and each one's distance from the shipped model "
        f"in fp32 over {any_row['positions']} positions of CNN/DailyMail text (reference perplexity "
        f"{any_row['reference_perplexity']:.2f}); `{served}` serves:",
        "",
        "| layout | MB | single tokens/s | batched tokens/s | top-1 agreement | mean KL (nats) | perplexity |",
        "|---|---|---|---|---|---|---|",
    ]
    for layout, row in table.items():
        size = number_cell(row["size_mb"], 0)
        single, batched = number_cell(row["single_tok_s"]), number_cell(row["batched_tok_s"])
        lines.append(
            f"| {layout} | {size} | {single} | {batched} | {row['top1_agreement']:.1%} | "
            f"{row['mean_kl_nats']:.4f} | {row['perplexity']:.2f} |"
        )
    return lines


def number_cell(value: float | None, digits: int = 1) -> str:
    """A report cell for a measured number: fixed digits, or n/a when it was not measured."""
    return "n/a" if value is None else f"{value:.{digits}f}"
