"""The operator config file: the shipped file is today's tables; a bad file is refused with its file, line, field and
reason; the file's settings sections fill what the environment leaves unset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.fleet.tables import BUILTIN_FILE, limits_for, tables
from shared.fleet.tiers import Tier
from shared.operator_config import ConfigError, builtin_config, configure, install, load_config
from shared.operator_config.document import GuardConfig, JudgeConfig
from shared.server_tool_settings import ServerToolSettings
from shared.settings import Settings
from tests.support.operator_file import shipped_text

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections


@pytest.fixture
def live_tables() -> Iterator[None]:
    """Tests that install a config get today's tables back afterwards."""
    yield
    install(builtin_config())


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetchat.yaml"
    path.write_text(text)
    return path


def shipped_with(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = shipped_text()
    assert text.count(old) >= count, old
    return write(tmp_path, text.replace(old, new, count))


def line_of(path: Path, needle: str, occurrence: int = 1) -> int:
    found = [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return found[occurrence - 1]


def only_issue(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert len(refused.value.issues) == 1, refused.value
    return refused.value


def test_the_builtin_file_read_as_an_operator_file_is_the_builtin_tables() -> None:
    config = load_config(SHIPPED)
    assert config.pools == tables().pools
    assert config.guard_pools == tables().guard_pools
    assert config.embedding_pools == tables().embedding_pools
    assert config.external_pools == tables().external_pools == {}
    assert config.tiers == tables().tiers
    assert config.server_tools == ServerToolSettings()


def test_the_guard_and_judge_sections_are_the_settings_options() -> None:
    """One statement of each default: the file's sections are the settings sections' option models."""
    settings = Settings.model_construct()  # defaults only, no environment
    guard = GuardConfig().model_dump(exclude={"api_key_env"})
    assert guard == settings.guard.model_dump(include=set(guard))
    assert JudgeConfig().model_dump() == settings.judge.model_dump(include={"pool", "model"})


def test_unknown_pool_in_a_tier(tmp_path: Path) -> None:
    path = shipped_with(tmp_path, "pools: [flagship, mini, vision]", "pools: [flagship, mini, vision, mistral]")
    [issue] = only_issue(path).issues
    assert (issue.file, issue.line, issue.field) == (str(path), line_of(path, "mistral"), "tiers.plus.pools.3")
    assert "unknown pool 'mistral'" in issue.reason


def test_negative_limit(tmp_path: Path) -> None:
    path = shipped_with(tmp_path, "key_rpm: 300", "key_rpm: -5")
    [issue] = only_issue(path).issues
    assert (issue.line, issue.field) == (line_of(path, "key_rpm: -5"), "tiers.plus.limits.key_rpm")
    assert "greater than or equal to 1" in issue.reason and "-5" in issue.reason


def test_duplicate_pool_key(tmp_path: Path) -> None:
    """PyYAML alone would keep the second `mini` silently."""
    text = shipped_text()
    start, end = text.index("  mini:\n"), text.index("  flagship:\n")
    path = write(tmp_path, text.replace("  flagship:\n", text[start:end] + "  flagship:\n", 1))
    [issue] = only_issue(path).issues
    assert (issue.line, issue.field) == (line_of(path, "  mini:", 2), "pools.mini")
    assert "duplicate key 'mini'" in issue.reason and f"line {line_of(path, '  mini:')}" in issue.reason


def test_duplicate_pool_across_sections(tmp_path: Path) -> None:
    path = shipped_with(
        tmp_path,
        "external_pools: {}\n",
        "external_pools:\n  mini:\n    description: d\n    external: {base_url: 'http://h/v1', model: m}\n"
        "    max_model_len: 4096\n    price: {prompt_usd_per_mtok: 1, completion_usd_per_mtok: 1}\n",
    )
    [issue] = only_issue(path).issues
    assert (issue.line, issue.field) == (line_of(path, "  mini:", 2), "external_pools.mini")
    assert "duplicate pool 'mini': already defined in pools" in issue.reason


def test_unknown_key(tmp_path: Path) -> None:
    path = shipped_with(tmp_path, "      gpu: H100\n", "      gpu: H100\n      gpus: 2\n")
    [issue] = only_issue(path).issues
    assert (issue.line, issue.field) == (line_of(path, "gpus: 2"), "pools.flagship.deployed.gpus")
    assert issue.reason.startswith("unknown key")


def test_unknown_section_and_every_problem_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "tiers:\n  free:\n    limits: {key_rpm: 0}\nguards: {}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    fields = {issue.field: issue.line for issue in refused.value.issues}
    assert fields["guards"] == 4
    assert fields["tiers.free.limits.key_rpm"] == 3
    assert fields["tiers.free.limits.key_tpm"] == 3  # required, missing: its section's line
    assert str(refused.value).startswith(f"{path}:")


def test_not_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "tiers:\n  free: [unclosed\n")
    [issue] = only_issue(path).issues
    assert issue.line is not None and issue.reason.startswith("not valid YAML")


def test_missing_api_key_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTED_KEY_FOR_TEST", raising=False)
    path = shipped_with(
        tmp_path,
        "external_pools: {}\n",
        "external_pools:\n  hosted:\n    description: d\n"
        "    external: {base_url: 'http://h/v1', model: m, api_key_env: HOSTED_KEY_FOR_TEST}\n"
        "    max_model_len: 4096\n    price: {prompt_usd_per_mtok: 1, completion_usd_per_mtok: 1}\n",
    )
    [issue] = only_issue(path).issues
    assert issue.field == "external_pools.hosted.external.api_key_env"
    assert "HOSTED_KEY_FOR_TEST is not set" in issue.reason
    monkeypatch.setenv("HOSTED_KEY_FOR_TEST", "sk-test")
    assert load_config(path).external_pools["hosted"].external.model == "m"  # type: ignore[index]


def test_section_left_out_keeps_builtin(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "tiers:\n  free:\n" + _free_tier(key_rpm=7)))
    assert config.pools == tables().pools
    assert config.tiers[Tier.FREE].limits.key_rpm == 7  # type: ignore[index]
    assert config.tiers[Tier.PLUS] == tables().tiers[Tier.PLUS]  # type: ignore[index]


def test_configure_installs_tables_and_fills_unset_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_tables: None
) -> None:
    text = "tiers:\n  free:\n" + _free_tier(key_rpm=7) + "judge: {pool: mini}\ncapacity: {mini: 3}\n"
    path = write(tmp_path, text + "guard: {kind: embedded, timeout_s: 9}\n")
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD_TIMEOUT_S", "2.5")  # the environment wins over the file
    settings = configure(Settings(config_file=path, data_dir=tmp_path))
    assert limits_for(Tier.FREE).key_rpm == 7
    assert (settings.judge.pool, settings.pool.capacity) == ("mini", {"mini": 3})
    assert settings.guard.timeout_s == 2.5
    assert settings.data_dir == tmp_path


def test_the_guard_section_turns_sentence_reads_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETCHAT_SAFETY_SENTENCE_READS", raising=False)
    path = write(tmp_path, "guard: {kind: embedded, sentence_reads: true}\n")
    assert configure(Settings(config_file=path, data_dir=tmp_path)).guard.sentence_reads is True
    monkeypatch.setenv("FLEETCHAT_SAFETY_SENTENCE_READS", "false")  # the environment wins over the file
    assert configure(Settings(config_file=path, data_dir=tmp_path)).guard.sentence_reads is False


def test_configure_refuses_before_installing(tmp_path: Path) -> None:
    path = write(tmp_path, "tiers:\n  free:\n" + _free_tier(key_rpm=-1))
    with pytest.raises(ConfigError):
        configure(Settings(config_file=path))
    assert limits_for(Tier.FREE) == builtin_config().tiers[Tier.FREE].limits  # type: ignore[index]


def test_guard_settings_error_names_the_guard_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETCHAT_SAFETY_GUARD", raising=False)
    monkeypatch.delenv("FLEETCHAT_SAFETY_GUARD_URL", raising=False)
    path = write(tmp_path, "# the remote guard needs its URL\nguard:\n  kind: moderation_api\n")
    with pytest.raises(ConfigError) as refused:
        configure(Settings(config_file=path))
    [issue] = refused.value.issues
    assert (issue.line, issue.field) == (2, "guard") and "SAFETY_GUARD_URL" in issue.reason


def _free_tier(key_rpm: int) -> str:
    return (
        f"    limits: {{key_rpm: {key_rpm}, key_tpm: 40000, tenant_rpm: 20, tenant_tpm: 40000,\n"
        "             max_output_tokens: 1024, brownout_max_output_tokens: 256}\n"
        "    safety: {audit_retention_days: 30}\n"
        "    pools: [mini]\n    default_pool: mini\n    retention_days: 30\n"
        "    slo: {ttft_p95_s: 3.0, inter_token_p95_s: 0.3}\n"
    )


def test_an_external_pool_can_be_the_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_tables: None) -> None:
    from functions.judging.client import judge_endpoint

    monkeypatch.delenv("FLEETCHAT_JUDGE_URL", raising=False)
    monkeypatch.delenv("FLEETCHAT_JUDGE_POOL", raising=False)
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-judge")
    path = shipped_with(
        tmp_path,
        "external_pools: {}\n",
        "external_pools:\n  hosted-judge:\n    description: d\n"
        "    external: {base_url: 'https://judge.example/v1', model: judge-large, api_key_env: JUDGE_KEY_FOR_TEST}\n"
        "    max_model_len: 4096\n    price: {prompt_usd_per_mtok: 1, completion_usd_per_mtok: 1}\n",
    )
    path.write_text(path.read_text().replace("  pool: flagship\n", "  pool: hosted-judge\n"))
    endpoint = judge_endpoint(configure(Settings(config_file=path, data_dir=tmp_path)))
    assert (endpoint.base_url, endpoint.model) == ("https://judge.example/v1", "judge-large")
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == "sk-judge"


def test_a_problem_in_a_builtin_default_has_no_line(tmp_path: Path) -> None:
    """A file whose pools drop `flagship`, which the built-in plus tier (not in the file) still names."""
    text = shipped_text()
    start, end = text.index("  flagship:\n    description"), text.index("  vision:\n    description")
    path = write(tmp_path, text[:start] + text[end:])
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    placed = {issue.field: issue.line for issue in refused.value.issues}
    assert placed["tiers.plus.pools.0"] == line_of(path, "pools: [flagship, mini, vision]")  # plus is in the file
    assert placed["judge.pool"] == line_of(path, "  pool: flagship")
    path = write(tmp_path, "pools:\n" + text[text.index("  mini:\n") : start])  # only `pools`: tiers are built in
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert {(issue.field, issue.line) for issue in refused.value.issues} == {
        ("tiers.plus.pools.0", None),
        ("tiers.plus.pools.2", None),
        ("tiers.enterprise.pools.0", None),
        ("tiers.enterprise.pools.2", None),
        ("judge.pool", None),
    }
    assert "(built-in default)" in str(refused.value)


LOCAL_ENGINE = "      engine: llama_cpp  #"  # the mini pool's `local` section, first in the shipped file


def test_the_decode_lane_too_small(tmp_path: Path) -> None:
    path = shipped_with(tmp_path, LOCAL_ENGINE, f"      llama_decode_lane_tokens: 64\n{LOCAL_ENGINE}")
    [issue] = only_issue(path).issues
    assert issue.field.endswith("local.llama_decode_lane_tokens") and "greater than or equal to 256" in issue.reason


def test_the_decode_lane_size_reaches_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_tables: None
) -> None:
    import gpu_workers.llama_cpp.engine
    from gpu_workers.registry import EngineOptions, build_engine

    install(load_config(shipped_with(tmp_path, LOCAL_ENGINE, f"      llama_decode_lane_tokens: 2048\n{LOCAL_ENGINE}")))
    made: dict[str, object] = {}
    monkeypatch.setattr(gpu_workers.llama_cpp.engine, "LlamaEngine", lambda gguf, **kwargs: made.update(kwargs))
    build_engine("mini", EngineOptions(engine="llama_cpp"), show_progress=False)
    assert made["decode_lane"] is True and made["decode_lane_kv_tokens"] == 2048


def test_a_rerank_pool_must_name_an_embedding_pool_of_the_file(tmp_path: Path) -> None:
    path = shipped_with(tmp_path, "embedding_pool: text-embedding-minilm", "embedding_pool: text-embedding-3-small")
    [issue] = only_issue(path).issues
    assert issue.field == "rerank_pools.rerank-minilm.local.embedding_pool"
    assert "unknown pool 'text-embedding-3-small'" in issue.reason
