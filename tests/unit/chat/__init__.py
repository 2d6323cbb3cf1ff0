"""Unit tests of the chat path (functions/chat/, retrieval, request parameters)."""
