"""The embedding worker: its HTTP app, micro-batcher and encoder."""
