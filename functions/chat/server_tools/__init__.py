"""Server-side tools (docs/server-tools.md): tools the gateway runs itself when a request asks for them with the
extension field `server_tools` (`["python", "calculator"]`), fed back to the model until it answers.

- service.py: the request's choice, validated (400 with `param`), and the per-request loop
- loop.py: the orchestrator (rounds of worker calls and tool runs)
- runner.py: one run (breaker, quota, timeout, metrics, audit)
- tools.py, calculator.py: the tools; tool_files.py: the python tool's files; functions/sandbox/: where it runs
- context.py: who a run is for
- replay.py: the final completion as a stream, for a client that asked to stream
"""
