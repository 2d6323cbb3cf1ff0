"""The guards a safety pipeline can be configured with: embedded, Llama Guard, a moderation API, rule-gated remotes."""
