"""`SyncLoads`: hits the OffloadingConnector loads within the step (0.33's
`sync_load_budget_bytes`).

An asynchronous load costs its request a step at least: it waits, its blocks allocated and
nothing scheduled, until the worker reports the load, and only then computes the rest of
its prompt. A small hit is cheaper to copy before the forward pass than to wait for, so 0.33
lets a step load up to `sync_load_budget_bytes` of KV (per worker) that way: the lookup
answers "not asynchronous", the scheduler counts the hit as computed and schedules the
request at once (its blocks hashed at allocation, as for a local hit), and the worker
finishes the job before the step runs, reporting it done in that step's output without
naming the request as finished receiving (it never waited).

The budget is spent at lookup time, in admission order: a hit is reserved while the bytes
reserved so far this step plus its own (`hit tokens x kv_bytes_per_token`) stay within the
budget, and a reservation stands for the step even if the scheduler then admits less (a
trimmed hit, an allocation that fails): upstream refunds nothing. A hit that would leave its
request nothing to compute loads asynchronously (the scheduler must schedule one token at
least). 0.32 has no budget (`Behaviour.offloading_sync_loads`).
"""

from __future__ import annotations

from impl.core.context_parallel import rank_block_size
from impl.core.specs import KVCacheConfig


def kv_bytes_per_token(kv_cache_config: KVCacheConfig) -> int:
    """KV bytes one token takes on one worker, summed over the groups (each group's block
    bytes on one rank over the scheduler's block: under DCP a rank holds a full-attention
    block's share, `impl.core.context_parallel`). Sliding-window and recurrent groups load
    less than this says; the budget overestimates them, as upstream's does."""
    dcp = kv_cache_config.dcp_world_size
    total = 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        rank_page = spec.page_size_bytes * rank_block_size(spec, dcp) // spec.block_size
        total += rank_page * len(group.layer_names) // spec.block_size
    return total


class SyncLoads:
    """One step's sync-load reservations: the requests whose hits load within the step and
    the bytes reserved so far."""

    def __init__(self, budget_bytes: int, bytes_per_token: int) -> None:
        self.budget_bytes = budget_bytes
        self.bytes_per_token = bytes_per_token
        self.requests: set[str] = set()
        self.num_bytes = 0

    def reserve(self, req_id: str, num_computed: int, num_hit: int | None,
                num_tokens: int) -> bool:
        """Reserve the budget for `req_id`'s hit of `num_hit` tokens past `num_computed`;
        False: it loads asynchronously (or there is nothing to load). A request looked up
        again in the step first drops its earlier reservation (whose bytes stay spent)."""
        self.requests.discard(req_id)
        if not self.budget_bytes or not num_hit or num_computed + num_hit >= num_tokens:
            return False
        num_bytes = num_hit * self.bytes_per_token
        if self.num_bytes + num_bytes > self.budget_bytes:
            return False
        self.num_bytes += num_bytes
        self.requests.add(req_id)
        return True

    def end_step(self) -> None:
        self.requests = set()
        self.num_bytes = 0
