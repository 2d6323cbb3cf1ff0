"""Unit tests of the local stack (functions/local_stack/, the CLI's settings)."""
