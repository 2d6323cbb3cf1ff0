"""The safety gate, guards, moderations and the judges, on real processes."""
