"""The engine benchmark: one engine measured alone (decode, prefix sharing, cores, memory) and against its peer."""
