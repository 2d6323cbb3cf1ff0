"""The SQLite backend of every store (the local default)."""
