"""Training, data building and evaluation of the safety classifier: never imported by the request path."""
