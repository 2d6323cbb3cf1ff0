"""Answer feedback: the service behind the API, the export for reward-model training and golden-set candidates."""
