# Storage for the deployed service: the conversations table and bucket, the KMS key that encrypts both, and the
# IAM role the Modal functions assume (OIDC), and the access-log bucket. Nothing in the local stack needs any of it.

terraform {
  required_version = ">= 1.6"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0"
    }
  }

  # State holds no secret (the service assumes a role: iam.tf); still keep it in an encrypted,
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
