"""How every S3 object the service writes is encrypted: with the deployment's KMS key, else SSE-S3."""

from __future__ import annotations


def s3_encryption(kms_key_id: str | None) -> dict[str, str]:
    """The `put_object` arguments for server-side encryption."""
    if kms_key_id:
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id}
    return {"ServerSideEncryption": "AES256"}
