"""Unit tests of the benchmark and the eval harness (functions/offline/bench/, evals/)."""
