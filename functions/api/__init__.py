"""The gateway's HTTP face: one router per endpoint group, the OpenAPI document, 405 answers and the web chat's static
files."""
