"""The scheduler-level lockstep harness: any two `System`s, one workload, the first divergence.

`system` is the seam (the protocol and the registry of adapters), `driver` feeds a workload to
one system step by step, `record` is what a step looks like once made canonical, `compare` finds
the first divergence between two record streams at a level, `lockstep` runs two systems side by
side, and `trace`, `report`, `html` and `divergences` turn results into files. Nothing here
imports vLLM at module level; the upstream adapter imports it when it is built.
"""
