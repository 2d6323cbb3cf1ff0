"""Share links: read-only snapshots of a conversation at an unguessable, expiring, revocable URL."""
