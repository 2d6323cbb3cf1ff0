"""The chat path end to end, on real processes: the API, streams, tools, structured output, the result cache."""
