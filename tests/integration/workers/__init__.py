"""The embedded llama.cpp engine and its decode lane, on the packaged model."""
