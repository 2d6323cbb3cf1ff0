"""The local stack's processes: supervision, the operator config at start, the docs' commands, the engine."""
