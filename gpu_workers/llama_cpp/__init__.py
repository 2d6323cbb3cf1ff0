"""The embedded llama.cpp engine: runtime, scheduler, decode lane, sampling, paged KV bookkeeping and core sharing."""
