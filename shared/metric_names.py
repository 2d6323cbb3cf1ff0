"""Prometheus metric names: the worker uses vLLM's, so dashboards and the benchmark work against either."""

NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"  # counter, exposed with a _total suffix
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
E2E_REQUEST_LATENCY = "vllm:e2e_request_latency_seconds"

GATEWAY_REQUESTS = "fleetchat_gateway_requests"
GATEWAY_UPSTREAM_LATENCY = "fleetchat_gateway_upstream_ttfb_seconds"
GATEWAY_CONVERSATION_TURNS = "fleetchat_gateway_conversation_turns"
GATEWAY_RATE_LIMITED = "fleetchat_gateway_rate_limited"
GATEWAY_ADMISSION_UNAVAILABLE = "fleetchat_gateway_admission_unavailable"
GATEWAY_LEDGER_TOKENS = "fleetchat_gateway_ledger_tokens"
GATEWAY_LEDGER_SPOOLED = "fleetchat_gateway_ledger_spooled"
SAFETY_BLOCKS = "fleetchat_safety_blocks"
SAFETY_HALTS = "fleetchat_safety_halts"
SAFETY_CHECK_LATENCY = "fleetchat_safety_check_seconds"
SAFETY_AUDIT_FAILURES = "fleetchat_safety_audit_failures"
SAFETY_GUARD_FAILURES = "fleetchat_safety_guard_failures"
FEEDBACK = "fleetchat_feedback"  # ratings given (a replacement counts again), by rating
FEEDBACK_REMOVED = "fleetchat_feedback_removed"


def counter_sample(name: str) -> str:
    """The sample name prometheus_client exposes for a counter."""
    return f"{name}_total"
