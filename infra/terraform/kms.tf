# One customer-managed key for the table and the bucket: disabling or scheduling it for deletion makes every stored
# conversation unreadable at once, and CloudTrail logs each use. No explicit key policy: the default one lets the
# account's IAM policies grant use, so the service user gets it through iam.tf, only via S3 and DynamoDB.
resource "aws_kms_key" "storage" {
  description             = "${local.name}: conversation bodies (S3), conversation and account records (DynamoDB)"
  enable_key_rotation     = true
  deletion_window_in_days = 30 # the longest: a mistaken destroy can still be cancelled
}

resource "aws_kms_alias" "storage" {
  name          = "alias/${local.name}-storage"
  target_key_id = aws_kms_key.storage.key_id
}
