"""OpenAI's published API description as fleetchat's contract (tests/contracts)."""
