"""One contract a store, run against every backend (SQLite, and DynamoDB + S3 on moto's server)."""
