"""The benchmark's results: statistics, per-phase result records, targets and the report."""
