# The identity of the Modal functions that use the stores (gateway, retention_sweep, meter_flush, batch_runner,
# vector_maintenance): an IAM role they assume with the OIDC identity token Modal injects into each of their containers
# (MODAL_IDENTITY_TOKEN), traded by
# boto3's web-identity provider for credentials that expire within the hour. No long-lived AWS key exists anywhere,
# so there is nothing to rotate or leak. https://modal.com/docs/guide/oidc-integration

# One IAM OIDC provider per issuer URL and account: where another stack already registered https://oidc.modal.com,
# pass its ARN as modal_oidc_provider_arn and none is created here. No thumbprint: IAM verifies the issuer's TLS
# certificate against its own trusted CAs, and a pinned thumbprint would break when Modal rotates its certificate.
resource "aws_iam_openid_connect_provider" "modal" {
  count          = var.modal_oidc_provider_arn == null ? 1 : 0
  url            = "https://oidc.modal.com"
  client_id_list = ["oidc.modal.com"] # the aud claim of Modal's tokens
}

locals {
  modal_oidc_provider_arn = var.modal_oidc_provider_arn != null ? var.modal_oidc_provider_arn : aws_iam_openid_connect_provider.modal[0].arn
}

# Who may assume the role: tokens Modal issued (aud) for the named functions of this app, in this workspace and
# environment (sub). IAM cannot match Modal's custom claims (workspace_id, app_name, ...), only sub, which carries
# them all: modal:workspace_id:W:environment_name:E:app_name:A:function_name:F:container_id:C.
data "aws_iam_policy_document" "service_trust" {
  statement {
    sid     = "ModalFunctionsOfThisApp"
    actions = ["sts:AssumeRoleWithWebIdentity"]

    principals {
      type        = "Federated"
      identifiers = [local.modal_oidc_provider_arn]
    }

    condition {
      test     = "StringEquals"
      variable = "oidc.modal.com:aud"
      values   = ["oidc.modal.com"]
    }

    # Only the container id is a wildcard: any container of exactly these functions.
    condition {
      test     = "StringLike"
      variable = "oidc.modal.com:sub"
      values = [
        for function in var.modal_function_names :
        "modal:workspace_id:${var.modal_workspace_id}:environment_name:${var.modal_environment}:app_name:${var.modal_app_name}:function_name:${function}:container_id:*"
      ]
    }
  }
}

resource "aws_iam_role" "service" {
  name                 = "${local.name}-modal"
  path                 = "/${var.name_prefix}/"
  description          = "Modal functions of ${var.modal_app_name} (OIDC): the conversation and account stores"
  assume_role_policy   = data.aws_iam_policy_document.service_trust.json
  max_session_duration = 3600 # boto3 refreshes before expiry, with the same Modal token
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

  # LanceDB's S3 + DynamoDB commit protocol (the vector stores): a conditional PutItem per commit, Query and GetItem for
  # the latest version, DeleteItem when a store's table is dropped, DescribeTable when it opens the commit store.
  statement {
    sid = "VectorCommits"
    actions = [
      "dynamodb:DeleteItem",
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
    ]
    resources = [aws_dynamodb_table.vector_commits.arn]
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

resource "aws_iam_role_policy" "service" {
  name   = "${local.name}-storage"
  role   = aws_iam_role.service.id
  policy = data.aws_iam_policy_document.service.json
}
