"""The chat-completions path: the pipeline and its service (route, call the worker), conversation turns, structured
output and tool arguments, delivery, stream relay and continuation, the result cache and the server-side tools."""
