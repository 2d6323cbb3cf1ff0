# The identity of the Modal gateway and the retention sweep. Modal runs outside AWS, so there is no instance or task
# role to assume and no OIDC federation to trust: an IAM user whose access key goes into the Modal secret
# fleetchat-secrets. Rotate the key by creating a second one, updating the secret, then deleting the first.
resource "aws_iam_user" "service" {
  name = "${local.name}-modal"
  path = "/${var.name_prefix}/"
}

resource "aws_iam_access_key" "service" {
  count = var.create_access_key ? 1 : 0
  user  = aws_iam_user.service.name
}

# Exactly the calls AwsConversationStore and the account adapters make (tests/unit/test_terraform.py derives them
# from their source files). ensure_resources' and ensure_accounts_table's CreateTable, UpdateTimeToLive and
# CreateBucket are for local and test stacks only: here Terraform owns the resources, and the service can neither
# create, reconfigure nor drop them.
data "aws_iam_policy_document" "service" {
  # TransactWriteItems has no IAM action of its own: each Put, Update and Delete inside it is authorized as
  # PutItem, UpdateItem and DeleteItem. GetItem is the consistent record read; BatchWriteItem deletes turns.
  statement {
    sid = "ConversationItems"
    actions = [
      "dynamodb:BatchWriteItem",
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.conversations.arn]
  }

  # Listing (by_updated) and the sweep (by_sweep) read the indexes; nothing writes to an index directly.
  statement {
    sid       = "ConversationIndexes"
    actions   = ["dynamodb:Query"]
    resources = ["${aws_dynamodb_table.conversations.arn}/index/*"]
  }

  # GetObject also authorizes HeadObject and the If-Match (ETag) conditional delete; DeleteObject also authorizes
  # the per-key deletes of DeleteObjects. No DeleteObjectVersion: only the lifecycle rule removes versions for good.
  statement {
    sid = "ConversationBodies"
    actions = [
      "s3:DeleteObject",
      "s3:GetObject",
      "s3:PutObject",
    ]
    resources = ["${aws_s3_bucket.conversations.arn}/*"]
  }

  # ListObjectsV2 under a conversation's or a tenant's prefix, before deleting what is there.
  statement {
    sid       = "ConversationListing"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.conversations.arn]
  }

  # Exactly the calls of AwsTenantStore, AwsRateLimits, AwsLedger, AwsMeterState, AwsSafetyAudit and AwsResultCache
  # (shared/storage/aws_accounts*.py, aws_limits.py, aws_ledger.py, aws_safety_audit.py, aws_result_cache.py: GetItem
  # and PutItem only, expiry by the table's TTL; the safety sweep's deletes
  # and hold updates are transactions too). Their transactions' Put, Update, Delete and ConditionCheck are authorized as
  # PutItem, UpdateItem, DeleteItem and ConditionCheckItem. BatchGetItem is the auth path's second read (key record
  # and tenant) and the admission pre-read of counters. No Scan: every access pattern is a key read or a Query.
  statement {
    sid = "AccountItems"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.accounts.arn]
  }

  # The meter exporter's totals over all tenants read ledger_by_hour, the table's only index.
  statement {
    sid       = "AccountIndexes"
    actions   = ["dynamodb:Query"]
    resources = ["${aws_dynamodb_table.accounts.arn}/index/ledger_by_hour"]
  }

  # Only through S3 and DynamoDB, on their requests for this bucket and these tables: the key can't be used directly.
  statement {
    sid = "StorageKey"
    actions = [
      "kms:Decrypt",
      "kms:DescribeKey",
      "kms:Encrypt",
      "kms:GenerateDataKey",
    ]
    resources = [aws_kms_key.storage.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.region}.amazonaws.com", "dynamodb.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_user_policy" "service" {
  name   = "${local.name}-conversations"
  user   = aws_iam_user.service.name
  policy = data.aws_iam_policy_document.service.json
}
