"""The safety pipeline: the pre-filter gate, the streaming post-filter, PII guardrails and the policy they share."""
