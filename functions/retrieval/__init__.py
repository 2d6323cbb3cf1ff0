"""Retrieval in chat: hybrid search (BM25 + vectors, fused by reciprocal rank) over a request's vector stores, a
re-rank, a context budget, a latency budget, and the citations an answer carries (docs/files.md)."""
