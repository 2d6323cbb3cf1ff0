"""Unit tests of the workers and engines (gpu_workers/)."""
