"""Who is calling and what is theirs: API keys and admin keys, web sessions, local secrets, conversation exports and
the retention policy."""
