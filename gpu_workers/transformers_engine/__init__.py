"""The transformers engine (continuous batching) and its constrained decoding."""
