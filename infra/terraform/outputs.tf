output "region" {
  description = "FLEETCHAT_AWS_REGION."
  value       = var.region
}

output "table_name" {
  description = "FLEETCHAT_CONVERSATIONS_TABLE."
  value       = aws_dynamodb_table.conversations.name
}

output "table_arn" {
  value = aws_dynamodb_table.conversations.arn
}

output "accounts_table_name" {
  description = "FLEETCHAT_ACCOUNTS_TABLE."
  value       = aws_dynamodb_table.accounts.name
}

output "accounts_table_arn" {
  value = aws_dynamodb_table.accounts.arn
}

output "bucket_name" {
  description = "FLEETCHAT_CONVERSATIONS_BUCKET."
  value       = aws_s3_bucket.conversations.id
}

output "bucket_arn" {
  value = aws_s3_bucket.conversations.arn
}

output "kms_key_arn" {
  description = "FLEETCHAT_CONVERSATIONS_KMS_KEY_ID: the adapter names this key on every put."
  value       = aws_kms_key.storage.arn
}

output "kms_alias" {
  value = aws_kms_alias.storage.name
}

output "access_log_bucket_name" {
  description = "Where S3 delivers the conversation bucket's server access logs (prefix conversations/)."
  value       = aws_s3_bucket.access_logs.id
}

output "service_role_arn" {
  description = "AWS_ROLE_ARN: the role the Modal functions assume with their OIDC identity token."
  value       = aws_iam_role.service.arn
}

output "modal_oidc_provider_arn" {
  value = local.modal_oidc_provider_arn
}

output "modal_secret_command" {
  description = "Creates the Modal secret the gateway and the jobs read (add the secret's other keys to it)."
  value       = <<-EOT
    modal secret create fleetchat-secrets \
      FLEETCHAT_AWS_REGION=${var.region} \
      FLEETCHAT_CONVERSATIONS_TABLE=${aws_dynamodb_table.conversations.name} \
      FLEETCHAT_CONVERSATIONS_BUCKET=${aws_s3_bucket.conversations.id} \
      FLEETCHAT_CONVERSATIONS_KMS_KEY_ID=${aws_kms_key.storage.arn} \
      FLEETCHAT_ACCOUNTS_TABLE=${aws_dynamodb_table.accounts.name} \
      FLEETCHAT_VECTORS_COMMIT_TABLE=${aws_dynamodb_table.vector_commits.name} \
      AWS_DEFAULT_REGION=${var.region} \
      AWS_ROLE_ARN=${aws_iam_role.service.arn}
  EOT
}
