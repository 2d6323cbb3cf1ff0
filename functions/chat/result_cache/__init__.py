"""The prompt/result cache for deterministic chat requests: which requests, their key, lookups and replays."""
