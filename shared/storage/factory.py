"""Open the stores the settings name: SQLite locally; DynamoDB (+ S3 for conversation bodies) when deployed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.settings import Settings
from shared.storage.accounts import TenantStore
from shared.storage.batches import BatchStore
from shared.storage.control_state import ControlState
from shared.storage.conversation_search import ConversationSearchIndex
from shared.storage.conversations import ConversationStore
from shared.storage.feedback import FeedbackStore
from shared.storage.indexed_conversations import IndexedConversationStore
from shared.storage.ledger import LedgerStore, MeterStateStore
from shared.storage.limits import RateLimitStore
from shared.storage.result_cache import ResultCacheStore
from shared.storage.safety_audit import SafetyAuditStore
from shared.storage.shares import ShareStore
from shared.storage.tool_audit import ToolAuditStore

if TYPE_CHECKING:
    from shared.storage.aws.accounts_layout import AwsAccountsConfig


def _aws_accounts_config(settings: Settings) -> AwsAccountsConfig:
    from shared.storage.aws.accounts_layout import AwsAccountsConfig

    return AwsAccountsConfig(
        table_name=settings.accounts_table, region=settings.aws_region, endpoint_url=settings.aws_endpoint_url
    )


def open_tenant_store(settings: Settings) -> TenantStore:
    if settings.accounts_store == "aws":
        from shared.storage.aws.accounts import AwsTenantStore

        return AwsTenantStore(_aws_accounts_config(settings))
    from shared.storage.sqlite.accounts import SQLiteStore

    return SQLiteStore(settings.db_path)


def open_control_state(settings: Settings) -> ControlState:
    """What gateway replicas share: Redis when configured (deployed), else the data dir's SQLite file."""
    config = settings.control_state
    if config.engine == "redis":
        from shared.storage.redis_control_state import RedisControlState

        assert config.redis_url is not None  # the section requires it
        return RedisControlState(
            config.redis_url.get_secret_value(), prefix=config.key_prefix, timeout_s=config.timeout_s
        )
    from shared.storage.sqlite.control_state import SQLiteControlState

    return SQLiteControlState(settings.control_db_path, busy_timeout_s=config.timeout_s)


def open_rate_limits(settings: Settings) -> RateLimitStore:
    if settings.accounts_store == "aws":
        from shared.storage.aws.limits import AwsRateLimits

        return AwsRateLimits(_aws_accounts_config(settings))
    from shared.storage.sqlite.limits import SQLiteRateLimits

    # Admission waits at most a second for another process's write lock, then the gateway admits unchecked.
    return SQLiteRateLimits(settings.db_path, busy_timeout_s=1.0)


def open_ledger(settings: Settings) -> LedgerStore:
    if settings.accounts_store == "aws":
        from shared.storage.aws.ledger import AwsLedger

        return AwsLedger(_aws_accounts_config(settings))
    from shared.storage.sqlite.ledger import SQLiteLedger

    return SQLiteLedger(settings.db_path)


def open_meter_state(settings: Settings) -> MeterStateStore:
    if settings.accounts_store == "aws":
        from shared.storage.aws.ledger import AwsMeterState

        return AwsMeterState(_aws_accounts_config(settings))
    from shared.storage.sqlite.ledger import SQLiteMeterState

    return SQLiteMeterState(settings.db_path)


def open_safety_audit(settings: Settings) -> SafetyAuditStore:
    if settings.accounts_store == "aws":
        from shared.storage.aws.safety_audit import AwsSafetyAudit

        return AwsSafetyAudit(_aws_accounts_config(settings))
    from shared.storage.sqlite.safety_audit import SQLiteSafetyAudit

    return SQLiteSafetyAudit(settings.db_path)


def open_tool_audit(settings: Settings) -> ToolAuditStore:
    """The audit of server-side tool runs, beside the safety audit (on AWS, in the accounts table)."""
    if settings.accounts_store == "aws":
        from shared.storage.aws.tool_audit import AwsToolAudit

        return AwsToolAudit(_aws_accounts_config(settings))
    from shared.storage.sqlite.tool_audit import SQLiteToolAudit

    return SQLiteToolAudit(settings.db_path)


def lance_location(settings: Settings, prefix: str, directory: str) -> tuple[str, dict[str, str]]:
    """(LanceDB URI, storage options) for a family of LanceDB tables: `<data dir>/<directory>` locally; deployed, the
    conversations bucket's `prefix` with the DynamoDB commit store, objects written with SSE-KMS under the storage key
    (the same as every other object in the bucket)."""
    if settings.conversation_store != "aws":
        return str(settings.data_dir / directory), {}
    uri = f"s3+ddb://{settings.conversations_bucket}/{prefix}?ddbTableName={settings.vectors.commit_table}"
    options = {"aws_region": settings.aws_region}
    if settings.aws_endpoint_url:  # moto in tests, or any S3-compatible endpoint
        options.update(
            aws_endpoint=settings.aws_endpoint_url,
            dynamodb_endpoint=settings.aws_endpoint_url,
            allow_http=str(settings.aws_endpoint_url.startswith("http://")).lower(),
        )
    if settings.conversations_kms_key_id:
        options.update(aws_server_side_encryption="aws:kms", aws_sse_kms_key_id=settings.conversations_kms_key_id)
    return uri, options


def open_conversation_search(settings: Settings) -> ConversationSearchIndex:
    """The conversation search index (LanceDB, a table per tenant) where the settings keep the vector stores."""
    from shared.storage.lance_conversation_search import LanceConversationSearch

    uri, options = lance_location(settings, settings.vectors.conversation_search_prefix, "conversation-search")
    v = settings.vectors
    return LanceConversationSearch(
        uri, options or None, read_consistency_s=v.read_consistency_s, purge_grace_s=v.purge_grace_s
    )


def open_conversation_store(settings: Settings) -> IndexedConversationStore:
    """The conversation store the settings name, feeding the conversation search index."""
    return IndexedConversationStore(_open_conversation_records(settings), open_conversation_search(settings))


def _open_conversation_records(settings: Settings) -> ConversationStore:
    if settings.conversation_store == "aws":
        from shared.storage.aws.conversations import AwsConversationStore, AwsStoreConfig

        return AwsConversationStore(
            AwsStoreConfig(
                table_name=settings.conversations_table,
                bucket=settings.conversations_bucket,
                region=settings.aws_region,
                endpoint_url=settings.aws_endpoint_url,
                kms_key_id=settings.conversations_kms_key_id,
            )
        )
    from shared.storage.sqlite.conversations import SQLiteConversationStore

    return SQLiteConversationStore(settings.db_path)


def _conversations_table(settings: Settings) -> AwsAccountsConfig:
    """The conversations table, for the stores that keep their items beside the conversations (feedback, shares)."""
    from shared.storage.aws.accounts_layout import AwsAccountsConfig

    return AwsAccountsConfig(
        table_name=settings.conversations_table, region=settings.aws_region, endpoint_url=settings.aws_endpoint_url
    )


def open_share_store(settings: Settings) -> ShareStore:
    """Share links live where the conversations they copy live (on AWS, in the conversations table)."""
    if settings.conversation_store == "aws":
        from shared.storage.aws.shares import AwsShares

        return AwsShares(_conversations_table(settings))
    from shared.storage.sqlite.shares import SQLiteShares

    return SQLiteShares(settings.db_path)


def open_feedback_store(settings: Settings) -> FeedbackStore:
    """Feedback lives where the conversations it rates live (on AWS, in the conversations table)."""
    if settings.conversation_store == "aws":
        from shared.storage.aws.feedback import AwsFeedback

        return AwsFeedback(_conversations_table(settings))
    from shared.storage.sqlite.feedback import SQLiteFeedback

    return SQLiteFeedback(settings.db_path)


def open_result_cache(settings: Settings) -> ResultCacheStore:
    """The prompt/result cache: its own SQLite file locally, items on the accounts table deployed (with its TTL)."""
    if settings.accounts_store == "aws":
        from shared.storage.aws.result_cache import AwsAccountsConfig, AwsResultCache

        # A lookup is on every cacheable request's path: give up fast (a miss) rather than wait out the usual budget.
        config = AwsAccountsConfig(
            table_name=settings.accounts_table,
            region=settings.aws_region,
            endpoint_url=settings.aws_endpoint_url,
            max_attempts=2,
            retry_budget_s=0.5,
        )
        return AwsResultCache(config)
    from shared.storage.sqlite.result_cache import SQLiteResultCache

    return SQLiteResultCache(settings.data_dir / "result-cache.db", max_entries=settings.result_cache.max_entries)


def open_batch_store(settings: Settings) -> BatchStore:
    """Batches live where files live (on AWS, in the conversations table, large line results in its bucket)."""
    if settings.conversation_store == "aws":
        from shared.storage.aws.batches import AwsBatchStore
        from shared.storage.aws.files import aws_clients

        ddb, s3 = aws_clients(settings)
        return AwsBatchStore(
            ddb, settings.conversations_table, s3, settings.conversations_bucket,
            kms_key_id=settings.conversations_kms_key_id,
        )  # fmt: skip
    from shared.storage.sqlite.batches import SQLiteBatchStore

    return SQLiteBatchStore(settings.db_path)
