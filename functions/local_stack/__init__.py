"""The local stack: the `fleetchat` CLI, the launcher and supervisor of worker processes, the stack lock, admin, config
and doctor commands."""
