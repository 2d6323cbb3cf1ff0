"""Files, vector stores, ingestion and embeddings, on real processes."""
