"""Unit tests of the Responses API layer (functions/responses/): translation, objects and stream events."""
