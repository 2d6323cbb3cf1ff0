"""The eval harness: suites run against a live deployment through its public API, with reports, baselines and history.

Nothing here is imported by the request path (tests/unit/test_request_path_imports.py checks it).
"""
