"""Open the stores the settings name (SQLite locally; conversations in DynamoDB + S3 when deployed)."""

from __future__ import annotations

from shared.settings import Settings
from shared.storage.base import TenantStore
from shared.storage.conversations import ConversationStore


def open_tenant_store(settings: Settings) -> TenantStore:
    from shared.storage.sqlite import SQLiteStore

    return SQLiteStore(settings.db_path)


def open_conversation_store(settings: Settings) -> ConversationStore:
    if settings.conversation_store == "aws":
        from shared.storage.aws_conversations import AwsConversationStore, AwsStoreConfig

        return AwsConversationStore(
            AwsStoreConfig(
                table_name=settings.conversations_table,
                bucket=settings.conversations_bucket,
                region=settings.aws_region,
                endpoint_url=settings.aws_endpoint_url,
                kms_key_id=settings.conversations_kms_key_id,
            )
        )
    from shared.storage.sqlite_conversations import SQLiteConversationStore

    return SQLiteConversationStore(settings.db_path)
