"""What the gateway and the GPU workers both import: wire schemas, settings, tiers, storage, errors."""
