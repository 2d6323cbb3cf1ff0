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

output "service_user_name" {
  description = "The IAM user of the Modal gateway and retention sweep."
  value       = aws_iam_user.service.name
}

output "service_access_key_id" {
  description = "AWS_ACCESS_KEY_ID (null when create_access_key is false)."
  value       = one(aws_iam_access_key.service[*].id)
}

output "service_secret_access_key" {
  description = "AWS_SECRET_ACCESS_KEY: terraform output -raw service_secret_access_key."
  value       = one(aws_iam_access_key.service[*].secret)
  sensitive   = true
}

output "modal_secret_command" {
  description = "Creates the Modal secret the gateway and the sweep read (add the secret's other keys to it)."
  value       = <<-EOT
    modal secret create fleetchat-secrets \
      FLEETCHAT_AWS_REGION=${var.region} \
      FLEETCHAT_CONVERSATIONS_TABLE=${aws_dynamodb_table.conversations.name} \
      FLEETCHAT_CONVERSATIONS_BUCKET=${aws_s3_bucket.conversations.id} \
      FLEETCHAT_CONVERSATIONS_KMS_KEY_ID=${aws_kms_key.storage.arn} \
      FLEETCHAT_ACCOUNTS_TABLE=${aws_dynamodb_table.accounts.name} \
      AWS_ACCESS_KEY_ID=${var.create_access_key ? one(aws_iam_access_key.service[*].id) : "<key id of ${aws_iam_user.service.name}>"} \
      AWS_SECRET_ACCESS_KEY="${var.create_access_key ? "$(terraform output -raw service_secret_access_key)" : "<its secret>"}"
  EOT
}
