"""The fleet's tables: model, embedding and external pools, tiers, canaries and the vLLM options per pool."""
