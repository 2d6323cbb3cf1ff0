"""Measuring a trained classifier or a configured guard: golden sets, cross-source reads, the guard band."""
