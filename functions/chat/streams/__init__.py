"""Streams of a chat answer: relay through the post-filter, capture, mid-stream continuation and resumable replay."""
