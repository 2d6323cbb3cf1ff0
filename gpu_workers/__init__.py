"""Engines and the worker server: the GPU side of fleetchat (CPU locally)."""
