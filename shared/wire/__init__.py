"""Wire models (OpenAI-compatible pydantic schemas), SSE framing and the error objects both sides speak."""
