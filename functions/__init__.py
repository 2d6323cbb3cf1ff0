"""Request-path functions (gateway, auth, routing) and scheduled jobs: the CPU side of fleetchat."""
