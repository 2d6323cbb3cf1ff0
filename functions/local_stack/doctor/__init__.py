"""`fleetchat doctor`: checks a deployment's configuration, stores, billing key, workers and web build."""
