"""Wire models of fleetchat's own endpoints (accounts, conversations, feedback), built on the stores' records."""
