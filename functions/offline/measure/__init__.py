"""Client-side measurement shared by the benchmark and the eval harness: the streaming load client, its statistics."""
