"""The chat worker's HTTP server: serving logic, text output, tool calls, metrics and its process entry point."""
