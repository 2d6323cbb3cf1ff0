"""Limits, priority admission, canaries, failover and faults across real gateway and worker processes."""
