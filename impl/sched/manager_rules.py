"""What the scheduler tells its KV-cache managers once, after it is built: the release's rules
(`impl.behaviour`) the managers follow and whether a KV connector reads their blocks.

One place, so a manager built alone (the KV-level tests, the KV machine) keeps its defaults
and a scheduler sets every flag the same way:

| manager flag                  | from                                        | who reads it   |
| ----------------------------- | ------------------------------------------- | -------------- |
| `eagle_junction_block_below`  | `Behaviour.eagle_junction_block_below`      | every group    |
| `remarks_prompt_boundary`     | not `Behaviour.mamba_align_skips_keyed_...` | mamba 'align'  |
| `offers_boundary_states`      | a KV connector is on                        | mamba 'align'  |
| `hash_lookahead`              | `SchedulerConfig.num_hash_lookahead_tokens` | mamba 'align'  |
| `junction_checkpoints`        | `takes_junction_checkpoints`                | mamba 'align'  |
"""

from __future__ import annotations

from impl.behaviour import Behaviour
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.mamba_align import MambaAlignManager


def takes_junction_checkpoints(kv_cache_manager: KVCacheManager, enabled: bool) -> bool:
    """Whether the engine's `enable_mamba_shared_prefix_checkpoint` takes effect: only with an
    EAGLE drafter whose hits give up their last block, sub-block hits (hashes finer than the
    mamba block), and no chain of MTP modules (whose cache calls stop short of the chunk's
    end, so never at the junction). One predicate for both sides: a chunk the scheduler ends
    at a junction the manager would not key costs a forward pass for nothing."""
    coordinator = kv_cache_manager.coordinator
    return (enabled and coordinator.use_eagle and coordinator.sub_block_hits
            and coordinator.num_reprefillable_tokens == 0)


def hand_rules_to_managers(kv_cache_manager: KVCacheManager, behaviour: Behaviour,
                           has_connector: bool, hash_lookahead: int = 0,
                           junction_checkpoints: bool = False) -> None:
    """Set the flags of the table above on every group's manager."""
    for manager in kv_cache_manager.coordinator.managers:
        manager.eagle_junction_block_below = behaviour.eagle_junction_block_below
        if isinstance(manager, MambaAlignManager):
            manager.remarks_prompt_boundary = not behaviour.mamba_align_skips_keyed_boundary
            # A connector stores mamba 'align' states by block, from the cache's offers.
            manager.offers_boundary_states = has_connector
            # Hashes covering tokens past their block: the prompt's tail state ends that far
            # before the end (`impl.core.mamba_prompt_tail`).
            manager.hash_lookahead = hash_lookahead
            manager.junction_checkpoints = junction_checkpoints
