# One customer-managed key for the tables and the bucket: disabling or scheduling it for deletion makes every stored
# conversation unreadable at once, and CloudTrail logs each use.
resource "aws_kms_key" "storage" {
  description             = "${local.name}: conversation bodies (S3), conversation and account records (DynamoDB)"
  enable_key_rotation     = true
  deletion_window_in_days = 30 # the longest: a mistaken destroy can still be cancelled
  policy                  = data.aws_iam_policy_document.storage_key.json
}

resource "aws_kms_alias" "storage" {
  name          = "alias/${local.name}-storage"
  target_key_id = aws_kms_key.storage.key_id
}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

locals {
  account_root = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"
}

# A key policy: its resources "*" is this key alone. The three identity-policy checks below read the document as if it
# were attached to a user or role, where "*" would be every resource of the account.
data "aws_iam_policy_document" "storage_key" {
  #checkov:skip=CKV_AWS_109:Key policy: "*" is this key; the account root statement is KMS's default delegation to IAM
  #checkov:skip=CKV_AWS_111:Key policy: "*" is this key; write use is the service role's, only via S3 and DynamoDB
  #checkov:skip=CKV_AWS_356:Key policy: a key policy's resource can only be "*" (the key it is attached to)
  # What the default key policy says, written down: the account's IAM policies decide who administers the key (and
  # who creates the tables and restores them, which needs CreateGrant through DynamoDB). Without it no IAM policy
  # could grant anything on the key, and only AWS support could recover it; KMS also refuses a policy that would
  # lock out the principal creating it.
  statement {
    sid       = "AccountAdministersTheKeyThroughIam"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = [local.account_root]
    }
  }

  # The service role's use, named by the key itself: the same four actions its IAM policy grants (iam.tf), only on
  # S3's and DynamoDB's requests in this region, never a direct Encrypt or Decrypt.
  statement {
    sid = "ServiceRoleUsesTheKeyThroughStorage"
    actions = [
      "kms:Decrypt",
      "kms:DescribeKey",
      "kms:Encrypt",
      "kms:GenerateDataKey",
    ]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = [aws_iam_role.service.arn]
    }

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.region}.amazonaws.com", "dynamodb.${var.region}.amazonaws.com"]
    }
  }
}
