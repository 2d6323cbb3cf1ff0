"""lm-evaluation-harness runs against the gateway (`fleetchat lm-eval`, docs/lm-eval.md)."""
