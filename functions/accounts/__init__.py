"""Who is calling and what the service keeps for them: keys, sessions, account data, exports, retention policy."""
