"""Offline tooling that never runs on the request path: the benchmark, the eval harness and safety training."""
