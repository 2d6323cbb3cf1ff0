variable "region" {
  description = "AWS region of the table, bucket and key; the Modal secret's FLEETCHAT_AWS_REGION."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as us-east-1."
  }
}

variable "name_prefix" {
  description = "Prefix of the names this module makes up (IAM user, KMS alias) and the Project tag."
  type        = string
  default     = "fleetchat"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}$", var.name_prefix))
    error_message = "name_prefix must be 2-31 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "environment" {
  description = "Deployment name (prod, staging, ...): part of the made-up names and the Environment tag."
  type        = string
  default     = "prod"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,15}$", var.environment))
    error_message = "environment must be 1-16 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "table_name" {
  description = "DynamoDB table of conversation records, turns and audits (FLEETCHAT_CONVERSATIONS_TABLE)."
  type        = string
  # The settings default, so a deployment that keeps it needs no override.
  default = "fleetchat-conversations"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]{3,255}$", var.table_name))
    error_message = "table_name must be 3-255 letters, digits, '_', '.' or '-'."
  }
}

variable "vector_commit_table_name" {
  description = "DynamoDB table LanceDB commits the vector stores' versions through (FLEETCHAT_VECTORS_COMMIT_TABLE)."
  type        = string
  default     = "fleetchat-vector-commits"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]{3,255}$", var.vector_commit_table_name))
    error_message = "vector_commit_table_name must be 3-255 letters, digits, '_', '.' or '-'."
  }
}

variable "accounts_table_name" {
  description = "DynamoDB table of tenants, keys, admission counters, the token ledger and the meter outbox (FLEETCHAT_ACCOUNTS_TABLE)."
  type        = string
  # The settings default, so a deployment that keeps it needs no override.
  default = "fleetchat-accounts"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]{3,255}$", var.accounts_table_name))
    error_message = "accounts_table_name must be 3-255 letters, digits, '_', '.' or '-'."
  }
}

variable "bucket_name" {
  description = "S3 bucket of conversation bodies (FLEETCHAT_CONVERSATIONS_BUCKET); bucket names are global."
  type        = string

  validation {
    condition     = length(var.bucket_name) >= 3 && length(var.bucket_name) <= 63
    error_message = "bucket_name must be 3-63 characters long."
  }
  validation {
    # Dots are legal S3 names but break TLS for virtual-hosted requests (the wildcard certificate covers one
    # label), and the bucket policy refuses plain HTTP.
    condition     = can(regex("^[a-z0-9][a-z0-9-]*[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be lowercase letters, digits and hyphens, starting and ending with a letter or digit (no dots, no uppercase)."
  }
  validation {
    condition = !anytrue([
      for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] : startswith(var.bucket_name, prefix)
    ])
    error_message = "bucket_name must not start with the reserved prefixes xn--, sthree- or amzn-s3-demo-."
  }
  validation {
    condition = !anytrue([
      for suffix in ["-s3alias", "--ol-s3", "--x-s3", "--table-s3"] : endswith(var.bucket_name, suffix)
    ])
    error_message = "bucket_name must not end with the reserved suffixes -s3alias, --ol-s3, --x-s3 or --table-s3."
  }
}

variable "deletion_protection" {
  description = "Refuse to delete the tables, and a bucket that still holds objects, on destroy."
  type        = bool
  default     = true
}

variable "noncurrent_version_days" {
  description = "Days a deleted or superseded conversation body stays recoverable before S3 expires it for good."
  type        = number
  default     = 1

  validation {
    # Every erase and every retention deletion lingers this long: keep it short (see README, Versioning).
    condition     = var.noncurrent_version_days >= 1 && var.noncurrent_version_days <= 7 && floor(var.noncurrent_version_days) == var.noncurrent_version_days
    error_message = "noncurrent_version_days must be a whole number of days from 1 to 7."
  }
}

variable "modal_workspace_id" {
  description = "The Modal workspace that runs the app (ac-...: `modal token info`, or the workspace settings)."
  type        = string

  validation {
    # A wildcard or colon here would widen the role's trust policy beyond the workspace.
    condition     = can(regex("^ac-[A-Za-z0-9]+$", var.modal_workspace_id))
    error_message = "modal_workspace_id must be a Modal workspace id such as ac-12345abcd."
  }
}

variable "modal_environment" {
  description = "The Modal environment the app is deployed to (`modal deploy --env`; Modal's default is main)."
  type        = string
  default     = "main"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", var.modal_environment))
    error_message = "modal_environment must be a Modal environment name: letters, digits, '.', '_' or '-'."
  }
}

variable "modal_app_name" {
  description = "The deployed Modal app (APP_NAME in gpu_workers/modal_app.py)."
  type        = string
  default     = "fleetchat"

  validation {
    # Modal's OIDC rule for app names; it injects no token into an app whose name breaks it.
    condition     = can(regex("^[A-Za-z0-9._-]{1,64}$", var.modal_app_name))
    error_message = "modal_app_name must be 1-64 letters, digits, '.', '_' or '-'."
  }
}

variable "modal_function_names" {
  description = "The Modal functions that may assume the service role: those that open the AWS stores."
  type        = list(string)
  default     = ["batch_runner", "doctor", "gateway", "meter_flush", "retention_sweep", "vector_maintenance"]

  validation {
    condition     = length(var.modal_function_names) > 0 && alltrue([for f in var.modal_function_names : can(regex("^[A-Za-z_][A-Za-z0-9_.-]*$", f))])
    error_message = "modal_function_names must name at least one function; no wildcards or colons."
  }
}

variable "modal_oidc_provider_arn" {
  description = "ARN of an existing IAM OIDC provider for https://oidc.modal.com in this account; null: create one."
  type        = string
  default     = null

  validation {
    # The trust policy's condition keys (oidc.modal.com:aud, :sub) only exist for a provider of exactly this issuer.
    condition     = var.modal_oidc_provider_arn == null || can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/oidc\\.modal\\.com$", var.modal_oidc_provider_arn))
    error_message = "modal_oidc_provider_arn must be the ARN of an IAM OIDC provider for oidc.modal.com."
  }
}

variable "access_log_days" {
  description = "Days the conversation bucket's S3 server access logs are kept."
  type        = number
  default     = 90

  validation {
    condition     = var.access_log_days >= 1 && floor(var.access_log_days) == var.access_log_days
    error_message = "access_log_days must be a whole number of days, at least 1."
  }
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}
