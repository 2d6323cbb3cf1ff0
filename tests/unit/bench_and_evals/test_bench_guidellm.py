"""The guidellm check: the command it runs (guidellm's quick-start request shape, nothing of ours added) and its
figures read from a report guidellm 0.8.1 wrote against `fleetchat up` (trimmed to the metrics read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.offline.bench.guidellm_check import GuidellmRun, command, read_report
from functions.offline.bench.results.guidellm_results import guidellm_lines

REPORT = Path(__file__).with_name("guidellm_report.json")


def run(tmp_path: Path) -> GuidellmRun:
    return GuidellmRun(
        url="http://127.0.0.1:8711",
        api_key="fc-key",
        model="mini",
        tokenizer=tmp_path / "tok",
        streams=2,
        requests=4,
        out_dir=tmp_path,
        timeout_s=60,
    )


def test_the_command_is_the_quick_starts_with_only_target_key_model_and_tokenizer_added(tmp_path: Path) -> None:
    argv = command("guidellm", run(tmp_path))
    options = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert argv[:2] == ["guidellm", "run"]
    assert options["--backend"] == "kind=openai_http,target=http://127.0.0.1:8711,model=mini,api_key=fc-key"
    assert options["--data"] == "kind=synthetic_text,prompt_tokens=256,output_tokens=128"
    assert "extras" not in " ".join(argv)  # guidellm's own request body: no fields of ours


def test_its_report_reads_back_as_whole_answers(tmp_path: Path) -> None:
    stats = read_report(run(tmp_path), json.loads(REPORT.read_text()))
    assert (stats.successful, stats.errored, stats.incomplete) == (4, 0, 0)
    assert stats.output_tokens_per_request == 128  # ignore_eos honoured: every answer as long as asked
    assert stats.ttft_ms_p50 is not None and stats.ttft_ms_p95 is not None and stats.ttft_ms_p50 <= stats.ttft_ms_p95
    assert "Every request answered with the length guidellm asked for." in guidellm_lines(stats)
    short = stats.model_copy(update={"output_tokens_per_request": 40.0})
    assert "Not every request completed as asked" in guidellm_lines(short)[-1]


def test_without_an_executable_or_a_key_the_phase_says_so_and_measures_nothing(tmp_path: Path) -> None:
    import asyncio

    from rich.progress import Progress

    from functions.offline.bench.phases.guidellm_phase import guidellm_phase

    notes: list[str] = []
    sizes = {"streams": 4, "requests": 16, "quick": False, "timeout_s": 60.0}
    with Progress(disable=True) as progress:
        missing = asyncio.run(guidellm_phase(None, "http://x", "k", "mini", tmp_path, progress, notes=notes, **sizes))
        keyless = asyncio.run(
            guidellm_phase("guidellm", "http://x", None, "mini", tmp_path, progress, notes=notes, **sizes)
        )
    assert missing is None and keyless is None
    assert "no guidellm executable" in notes[0] and "no API key" in notes[1]


def test_a_relative_executable_is_found_as_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's working folder is its output folder: `.venv-guidellm/bin/guidellm` must still be found there."""
    from functions.offline.bench.guidellm_check import find_guidellm

    executable = tmp_path / "bin" / "guidellm"
    executable.parent.mkdir()
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert find_guidellm("bin/guidellm") == str(executable)
