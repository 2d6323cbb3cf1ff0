"""The benchmark's phases against a running gateway: one module a measured behaviour."""
