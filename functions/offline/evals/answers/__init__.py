"""Checks on a model's answer: programmatic checks, refusal markers, the sandbox that runs its code."""
