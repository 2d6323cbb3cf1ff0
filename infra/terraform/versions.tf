# Storage for the deployed service: the conversations table and bucket, the KMS key that encrypts both, and the
# IAM identity the Modal gateway and retention sweep use. Nothing in the local stack needs any of it.

terraform {
  required_version = ">= 1.6"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0"
    }
  }

  # State holds the service user's secret access key (when create_access_key is true): keep it in an encrypted,
  # access-controlled remote backend, e.g.
  #   backend "s3" { bucket = "my-tf-state" key = "fleetchat/storage.tfstate" region = "us-east-1" encrypt = true }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = local.tags
  }
}

locals {
  name = "${var.name_prefix}-${var.environment}"
  tags = merge(
    {
      Project     = var.name_prefix
      Environment = var.environment
      ManagedBy   = "terraform"
    },
    var.tags,
  )
}
