"""The benchmark: load, prefix-cache and gateway-overhead measurements against a running fleetchat."""
