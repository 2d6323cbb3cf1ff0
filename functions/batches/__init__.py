"""The Batch API (`/v1/batches`): batches over uploaded JSONL, run line by line through the same services as the
interactive endpoints, billed at the batch price (docs/batches.md)."""
