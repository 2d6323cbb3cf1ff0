# The conversation bucket's server access logs. S3 delivers them itself (the logging service principal), so this
# bucket must take SSE-S3: log delivery does not support a default SSE-KMS key on the target bucket.
resource "aws_s3_bucket" "access_logs" {
  #checkov:skip=CKV_AWS_18:This is the access-log bucket; logging it into itself or a third bucket only logs the log deliveries
  #checkov:skip=CKV_AWS_145:S3 server access log delivery supports only SSE-S3 on the target bucket, not SSE-KMS
  #checkov:skip=CKV_AWS_144:Logs are kept in the region of the bucket they describe; a replica would only copy tenant ids elsewhere
  #checkov:skip=CKV2_AWS_62:Nothing reacts to a log delivery; the conversation bucket's events go to EventBridge (s3.tf)
  # Bucket names are global: a prefix of the conversation bucket's name plus a suffix Terraform picks (37 + 26 chars).
  bucket_prefix = "${trimsuffix(substr(var.bucket_name, 0, 31), "-")}-logs-"
  force_destroy = !var.deletion_protection
}

resource "aws_s3_bucket_public_access_block" "access_logs" {
  bucket                  = aws_s3_bucket.access_logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id

  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off: S3's log delivery is granted by the bucket policy below
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

# Versioned, so that deleting a log (covering tracks) leaves its version for a week.
resource "aws_s3_bucket_versioning" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id

  rule {
    id     = "expire-logs"
    status = "Enabled"

    filter {}

    expiration {
      days = var.access_log_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 7
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.access_logs]
}

data "aws_iam_policy_document" "access_logs" {
  # S3's logging service may write, under conversations/ only, and only for the conversation bucket of this account
  # (a bucket name can be taken by another account once deleted, so the account is checked too).
  statement {
    sid       = "S3ServerAccessLogDelivery"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.access_logs.arn}/conversations/*"]

    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_s3_bucket.conversations.arn]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.access_logs.arn, "${aws_s3_bucket.access_logs.arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id
  policy = data.aws_iam_policy_document.access_logs.json

  # S3 rejects policy changes while the public access block is being applied.
  depends_on = [aws_s3_bucket_public_access_block.access_logs]
}
