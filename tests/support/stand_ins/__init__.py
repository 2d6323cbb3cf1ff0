"""Processes that stand in for a worker, a guard or a judge where the model is not the point."""
