"""The completions path through the gateway (`POST /v1/completions`)."""
