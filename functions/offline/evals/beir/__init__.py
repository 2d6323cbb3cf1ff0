"""Retrieval quality on public BEIR sets (functions/offline/evals/beir/retrieval_eval.py)."""
