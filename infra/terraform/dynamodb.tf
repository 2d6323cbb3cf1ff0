# The layout of shared/storage/aws_layout.py (ensure_resources creates the same table for local and test runs;
# tests/unit/test_terraform.py keeps the two equal):
#   record  pk=TENANT#{tenant}  sk=CONV#{conv}
#   turn    pk=TENANT#{tenant}  sk=CONV#{conv}#TURN#{version:08d}
#   audit   pk=AUDIT            sk={at}#{digest}
# Both indexes are sparse: only items carrying their key attributes appear in them.
resource "aws_dynamodb_table" "conversations" {
  name                        = var.table_name
  billing_mode                = "PAY_PER_REQUEST" # traffic follows chat use: no capacity to plan or throttle on
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }
  attribute {
    name = "sk"
    type = "S"
  }
  attribute {
    name = "updated_key"
    type = "S"
  }
  attribute {
    name = "sweep_pk"
    type = "S"
  }
  attribute {
    name = "sweep_sk"
    type = "S"
  }

  # A tenant's live conversations, newest first: updated_key = {updated_at}#{conv}, removed on soft delete.
  global_secondary_index {
    name            = "by_updated"
    hash_key        = "pk"
    range_key       = "updated_key"
    projection_type = "ALL"
  }

  # What the retention sweep must visit: sweep_pk = SWEEP#{0..7}, sweep_sk = {sweep time}#{conv}.
  global_secondary_index {
    name            = "by_sweep"
    hash_key        = "sweep_pk"
    range_key       = "sweep_sk"
    projection_type = "ALL"
  }

  # A backstop only: expires_at is the sweep time plus a week, and TTL deletes lag and never touch S3. The hourly
  # retention_sweep Modal cron does the real deletions (bodies, turns, record, audit).
  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = aws_kms_key.storage.arn
  }
}

# The vector stores' LanceDB commit store (shared/storage/lance_vector_index.py; ensure_resources creates the same table
# for local and test runs): one item per committed version of a store's table, keyed by the table's path in the bucket,
# so two gateway containers writing one store never both commit the same version (plain S3 is safe for one writer only).
resource "aws_dynamodb_table" "vector_commits" {
  name                        = var.vector_commit_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "base_uri"
  range_key                   = "version"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "base_uri"
    type = "S"
  }
  attribute {
    name = "version"
    type = "N"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = aws_kms_key.storage.arn
  }
}
