"""Accounts, conversations and feedback through the API, on real processes."""
