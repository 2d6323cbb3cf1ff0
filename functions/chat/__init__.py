"""The chat-completions path: the service, conversation turns, structured output and tool arguments, stream relay and
continuation, the result cache."""
