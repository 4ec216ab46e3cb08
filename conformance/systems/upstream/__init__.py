"""Upstream vLLM in this process as a System: its configs built from a workload (`config`),
its KV events read into canonical ones (`events`), the adapter itself (`system`)."""
