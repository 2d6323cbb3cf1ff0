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

# Requests by outcome and the per-tier SLO view (docs/observability.md).
GATEWAY_HTTP_RESPONSES = "fleetchat_gateway_http_responses"  # every endpoint, by route template, method and status
GATEWAY_TTFT = "fleetchat_gateway_ttft_seconds"  # arrival at the gateway -> first content chunk sent, by tier and pool
GATEWAY_INTER_TOKEN = "fleetchat_gateway_inter_token_seconds"  # gaps between content chunks sent
GATEWAY_E2E = "fleetchat_gateway_e2e_seconds"  # arrival -> the last byte of the answer sent
GATEWAY_GOODPUT = "fleetchat_gateway_goodput"  # streamed requests judged against the tier's TierSlo, by met
GATEWAY_SPEND_USD = "fleetchat_gateway_spend_usd"  # tokens x the pool's price, by tier and pool

# Metrics other parts of the gateway define in their own modules (on GatewayMetrics.registry), declared here by name
# and type so the alert rules and the dashboard (ops/) can be checked before those modules are merged. Once they are,
# the registry holds them and this table is only a cross-check (tests/unit/deploy/test_ops_rules.py): keep it in step.
PEER_METRICS: dict[str, str] = {
    # routing and reliability: per-replica breakers, retries, mid-stream continuation
    "fleetchat_gateway_breaker_state": "gauge",  # {pool,replica}: 0 closed, 1 half-open, 2 open
    "fleetchat_gateway_upstream_retries": "counter",  # {pool}
    "fleetchat_gateway_continuations": "counter",  # {pool,outcome}: continued, fallback, failed
    "fleetchat_gateway_continuation_ttft_seconds": "histogram",  # {pool}: failure -> the continuing leg's content
    # priority admission and automatic brownout
    "fleetchat_gateway_queue_depth": "gauge",  # {pool}
    "fleetchat_gateway_pool_in_flight": "gauge",  # {pool}: requests holding a place
    "fleetchat_gateway_pool_capacity": "gauge",  # {pool}
    "fleetchat_gateway_queue_wait_seconds": "histogram",  # {tier,pool}
    "fleetchat_gateway_brownout_active": "gauge",  # 0/1
    "fleetchat_gateway_brownout_transitions": "counter",  # {to}: on, off
    "fleetchat_gateway_downgrades": "counter",  # {tier,from_pool,to_pool,reason}
    "fleetchat_gateway_admission_refused": "counter",  # {tier,pool,reason}
    # resumable streams and canaries
    "fleetchat_gateway_stream_resumes": "counter",  # {outcome}
    "fleetchat_gateway_resume_buffer_bytes": "gauge",
    "fleetchat_gateway_canary_rollbacks": "counter",  # {pool}
    "fleetchat_gateway_stream_takeovers": "counter",  # {outcome}: finished, failed
    # the fleet: the shared control state (functions/control/fleet_sync.py)
    "fleetchat_gateway_fleet_gateways": "gauge",
    "fleetchat_gateway_fleet_sync_failures": "counter",  # {step}
}


def counter_sample(name: str) -> str:
    """The sample name prometheus_client exposes for a counter."""
    return f"{name}_total"
