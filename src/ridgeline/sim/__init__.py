"""The engine, simulated: continuous batching with paged KV, chunked prefill, preemption,
prefix caching and speculative decoding, step by step through step_cost."""
