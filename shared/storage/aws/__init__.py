"""The AWS backend of every store: DynamoDB and S3 (deployed)."""
