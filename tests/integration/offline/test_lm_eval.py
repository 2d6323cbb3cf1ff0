"""lm-evaluation-harness 0.4.13, unmodified, against the real gateway and workers: its log-likelihood task through
`/v1/completions` and its generation task through chat completions, two documents each of the public GSM8K file,
with its remote tokenizer on the gateway's `/tokenize` (the full 50 are `make lm-eval`; docs/lm-eval.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from functions.offline.lm_eval.run import LmEvalConfig, run_all
from tests.conftest import Stack

pytestmark = pytest.mark.slow

LM_EVAL = Path(__file__).parents[3] / ".venv-lmeval" / "bin" / "lm_eval"


@pytest.fixture(scope="module")
def lm_eval() -> str:
    if not LM_EVAL.is_file():
        if os.environ.get("FLEETCHAT_REQUIRE_LM_EVAL") == "1":
            pytest.fail("lm-eval is required (FLEETCHAT_REQUIRE_LM_EVAL=1) but .venv-lmeval is not installed")
        pytest.skip("lm-eval is not installed: `make .venv-lmeval/.installed`")
    return str(LM_EVAL)


def test_lm_evaluation_harness_runs_to_completion(stack: Stack, plus_key: str, lm_eval: str, tmp_path: Path) -> None:
    cfg = LmEvalConfig(lm_eval=lm_eval, base_url=stack.gateway_url, api_key=plus_key, limit=2, out_dir=tmp_path)
    loglik, generation = run_all(cfg)
    assert (loglik.documents, generation.documents) == (2, 2)
    assert 0.0 <= (loglik.metrics["acc,none"] or 0.0) <= 1.0
    assert (loglik.metrics["perplexity,none"] or 0.0) > 1.0  # a real model's likelihood of the gold answers
    assert generation.metrics["exact_match,flexible-extract"] is not None
    report = (tmp_path / "lm-eval.md").read_text()
    assert "fleetchat_gsm8k_answer_loglik" in report and plus_key not in report
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if plus_key in p.read_text(errors="replace")]  # the key is redacted
