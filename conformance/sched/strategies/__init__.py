"""Hypothesis strategies for whole workloads: the scheduler's generated space (`workloads`),
Continuum agent jobs (`continuum`), the CPU offload tier (`offload`)."""
