"""KV-cache planning: how a model's layers become KV-cache groups, block sizes and a pool.

Our own implementation of the rules in seed 001 (hybrid KV cache manager) as vLLM 0.32.0
applies them, learned from the seed, the docs and differential probing; `conformance/` proves
it equal to upstream's planner. Pure Python: no torch, no vllm.
"""

from impl.plan.errors import PlanError
from impl.plan.layers import LayerSpec, ModelSpec
from impl.plan.options import PlanOptions
from impl.plan.planner import KVCachePlan, plan_kv_cache

__all__ = ["KVCachePlan", "LayerSpec", "ModelSpec", "PlanError", "PlanOptions", "plan_kv_cache"]
