# Conversation bodies: {tenant}/{conv}/{version}.json, one full snapshot per version, written once (If-None-Match)
# and deleted when superseded or when the conversation is deleted.
resource "aws_s3_bucket" "conversations" {
  # Disaster recovery is point-in-time recovery for the tables and versioning for the bodies, in this region. A
  # replica in a second region would restore nothing alone (the records that point to the bodies stay here; a global
  # table would be the other half), would put personal data in a second jurisdiction, and would outlive erasure: S3
  # never replicates version deletions, so an erased body would stay there until a lifecycle rule of its own.
  #checkov:skip=CKV_AWS_144:Cross-region replication: DR is PITR + versioning in-region; a replica outlives erasure and adds a jurisdiction
  bucket        = var.bucket_name
  force_destroy = !var.deletion_protection # false: destroy fails while conversations remain
}

# Who read, wrote or deleted which body, from where (S3 server access logs; CloudTrail data events are the paid
# alternative). Object keys name tenants and conversations, never their content.
resource "aws_s3_bucket_logging" "conversations" {
  bucket        = aws_s3_bucket.conversations.id
  target_bucket = aws_s3_bucket.access_logs.id
  target_prefix = "conversations/"

  # Logs land under their day (conversations/<account>/<region>/<bucket>/YYYY/MM/DD/): Athena can read a day alone.
  target_object_key_format {
    partitioned_prefix {
      partition_date_source = "EventTime"
    }
  }

  # The log bucket must accept S3's deliveries before logging is switched on.
  depends_on = [aws_s3_bucket_policy.access_logs]
}

# Every object event goes to the account's default EventBridge bus, free of charge: an operator can alert on it (a
# delete by any principal but the service role, say) with a rule, without touching this bucket. No rule is made here.
resource "aws_s3_bucket_notification" "conversations" {
  bucket      = aws_s3_bucket.conversations.id
  eventbridge = true
}

resource "aws_s3_bucket_public_access_block" "conversations" {
  bucket                  = aws_s3_bucket.conversations.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "conversations" {
  bucket = aws_s3_bucket.conversations.id

  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off: access is IAM and the bucket policy only
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "conversations" {
  bucket = aws_s3_bucket.conversations.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.storage.arn
    }
    # One KMS call per bucket key instead of one per object: the adapter writes an object per turn. Applies to the
    # adapter's puts too, which name the key but not the bucket-key header.
    bucket_key_enabled = true
  }
}

# Versioning gives a short undo window for bodies (a bad deploy or sweep bug deletes them; DynamoDB's point-in-time
# recovery can bring the records back but not the objects). Deletes leave noncurrent versions, so the lifecycle
# below expires them after noncurrent_version_days: an erase is final within that plus S3's lifecycle lag.
resource "aws_s3_bucket_versioning" "conversations" {
  bucket = aws_s3_bucket.conversations.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "conversations" {
  bucket = aws_s3_bucket.conversations.id

  rule {
    id     = "expire-deleted-bodies"
    status = "Enabled"

    filter {}

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }

    # Every deleted body leaves a delete marker; drop it once the versions under it have expired.
    expiration {
      expired_object_delete_marker = true
    }

    # The adapter never uploads in parts; this only cleans up after other tools.
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.conversations]
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.conversations.arn, "${aws_s3_bucket.conversations.arn}/*"]

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

  statement {
    sid       = "DenyOldTls"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.conversations.arn, "${aws_s3_bucket.conversations.arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }

  # A put without an encryption header gets the default (the key above). The adapter always sends one: aws:kms
  # when FLEETCHAT_CONVERSATIONS_KMS_KEY_ID is set, AES256 when it is not, which would silently override the
  # default. Refusing a header other than aws:kms turns that misconfiguration into a loud 503 instead of bodies
  # outside the key. Both conditions must hold: the header is present (Null false) and it is not aws:kms. (A negated
  # operator alone, or its IfExists form, is true for an absent header and would refuse default-encrypted puts.)
  statement {
    sid       = "DenyNonKmsEncryptionHeader"
    effect    = "Deny"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.conversations.arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Null"
      variable = "s3:x-amz-server-side-encryption"
      values   = ["false"]
    }

    condition {
      test     = "StringNotEquals"
      variable = "s3:x-amz-server-side-encryption"
      values   = ["aws:kms"]
    }
  }
}

resource "aws_s3_bucket_policy" "conversations" {
  bucket = aws_s3_bucket.conversations.id
  policy = data.aws_iam_policy_document.bucket.json

  # S3 rejects policy changes while the public access block is being applied.
  depends_on = [aws_s3_bucket_public_access_block.conversations]
}
