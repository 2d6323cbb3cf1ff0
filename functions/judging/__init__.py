"""The LLM judge: a rubric (helpfulness, accuracy, format, 1-5), a tolerant reply parser and an OpenAI-compatible
client. Used by the gateway's shadow judge and by the eval suites; imports nothing from either."""
