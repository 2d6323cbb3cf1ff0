# The layout of shared/storage/aws_accounts_layout.py (ensure_accounts_table creates the same table for local and
# test runs; tests/unit/test_terraform.py keeps the two equal). Accounts, admission counters shared by every gateway
# replica, the token ledger, the meter exporter's outbox and the safety audit, all in one table:
#   tenant, users, email guards, API keys  pk=TENANT#{tenant}   sk=TENANT | USER#{user} | EMAIL#{email} | KEY#{key}
#   tenant directory                       pk=TENANTS           sk={created_at}#{tenant}
#   key lookups (hashes only)              pk=KEYHASH#{sha256} | KEYID#{key} | ADMINKEY#{sha256}
#   rate counters, message logs            pk=RL#{scope} sk=W#{window} | pk=MSG#{subject} sk=LOG   (TTL)
#   ledger entries, request-id guards      pk=LEDGER#{tenant} sk={created_at}#{request} | pk=REQ#{request}
#   meter sends, pending copies, cursor    pk=METER             sk=SEND#… | PENDING#… | ID#… | CURSOR
#   safety audit records                   pk=SAFETY#{tenant}   sk={at}#{request}#{layer}                      (TTL)
#   their (request, layer) guards          pk=SAFETYREQ#{request} sk={layer}                                   (TTL)
#   their expiry entries, for the sweep    pk=SAFETYEXP#{0..7}  sk={expires_at}#{tenant}#{request}#{layer}     (TTL)
resource "aws_dynamodb_table" "accounts" {
  name                        = var.accounts_table_name
  billing_mode                = "PAY_PER_REQUEST" # admission traffic follows request traffic: nothing to provision
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
    name = "hour_pk"
    type = "S"
  }

  # Ledger entries by hour, for the meter exporter's totals over all tenants without a Scan: hour_pk =
  # HOUR#{yyyy-mm-ddThh}#{0..7} (8 shards spread an hour's writes), sk = {created_at}#{request}. Sparse: only ledger
  # entries carry hour_pk. It projects just what the totals add up.
  global_secondary_index {
    name               = "ledger_by_hour"
    hash_key           = "hour_pk"
    range_key          = "sk"
    projection_type    = "INCLUDE"
    non_key_attributes = ["tenant_id", "model", "prompt_tokens", "completion_tokens", "cached_tokens", "price_class"]
  }

  # Rate counters (an hour after their window closes) and message logs (after their rolling window) expire; nothing
  # else carries expires_at but safety audit items, a week after their retention as a backstop to the retention sweep
  # (which deletes them itself, and takes the TTL off a held tenant's). The adapters never rely on the deletion:
  # expired windows are simply not read again.
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
