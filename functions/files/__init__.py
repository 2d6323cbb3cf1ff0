"""Files and vector stores (issue 23, docs/files.md): upload checks, text extraction, chunking, ingestion, search."""
