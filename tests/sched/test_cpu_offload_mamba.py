"""The CPU offload tier (SimpleCPUOffloadConnector) beside a mamba 'align' group: eager mode
copies each state the cache keys by its block (`BoundaryState`) in the step that keys it, never
from the mirrored table by position (the mamba table nulls and relocates its entries); a hit
then loads the full-attention blocks and the one state where it ends.

Layout: full attention and mamba ('align'), blocks of 4 tokens, a CPU pool of 32 blocks."""

from __future__ import annotations

import pytest

from impl.connector.cpu_offload import lazy_target_blocks
from impl.connector.types import KVConnectorOutput, OffloadSettings
from impl.core.mamba_boundaries import BoundaryState
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.offload_helpers import BLOCK, run_step, stores_done


def layout(num_blocks: int, mode: str = "align") -> KVCacheConfig:
    return KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("mamba",), MambaSpec(BLOCK, mamba_cache_mode=mode))))


def mamba_offload_scheduler(num_blocks: int = 9, mode: str = "align") -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, kv_connector=OffloadSettings(32, False, "fail"))
    return Scheduler(config, layout(num_blocks, mode), none_hash=NONE_HASH, log_stats=True)


def run_done(scheduler: Scheduler, report: KVConnectorOutput | None) -> tuple[
        KVConnectorOutput | None, list[int], list[int]]:
    """One step; (the report finishing its store, its GPU and CPU blocks)."""
    _, meta = run_step(scheduler, report)
    done = stores_done(meta.store_event) if meta.store_event >= 0 else None
    return done, meta.store_gpu_blocks, meta.store_cpu_blocks


def test_a_keyed_state_is_copied_by_its_block_in_the_step_that_keys_it() -> None:
    """A 13-token prompt: mamba 'align' schedules 12 tokens and keys the state at 12 (block 4).
    That step copies block 4 at once; the full-attention blocks follow a step later, once
    their tokens are confirmed, and the mamba table is never read by position."""
    scheduler = mamba_offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    output, meta = run_step(scheduler)
    assert output.scheduled_new_reqs[0].block_ids == ([1, 2, 3], [0, 0, 4])
    assert output.boundary_states == [BoundaryState("a", 1, 4, 12)]
    assert (meta.store_event, meta.store_gpu_blocks, meta.store_cpu_blocks) == (0, [4], [1])
    _, gpu, cpu = run_done(scheduler, stores_done(0))
    assert (gpu, cpu) == ([1, 2, 3], [2, 3, 4])


def test_a_resend_loads_the_full_blocks_and_the_state_where_its_hit_ends() -> None:
    """a's prompt reaches the CPU, a filler evicts its GPU blocks, and b sends it again: b
    loads 12 tokens (the last is computed again), three full-attention blocks and the state
    at 12 (CPU block 1) into the mamba table's block at index 2."""
    scheduler = mamba_offload_scheduler()
    report: KVConnectorOutput | None = None
    for name, prompt in (("a", range(10, 23)), ("filler", range(100, 115))):
        scheduler.add_request(make_request(name, prompt, BLOCK, max_tokens=1))
        for _ in range(3):
            report, _, _ = run_done(scheduler, report)
    scheduler.add_request(make_request("b", range(10, 23), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler, report)
    assert (meta.load_gpu_blocks, meta.load_cpu_blocks) == ([1, 4, 2, 3], [2, 3, 4, 1])
    assert scheduler.requests["b"].num_computed_tokens == 12
    assert scheduler.kv_cache_manager.get_block_ids("b") == ([1, 4, 2], [0, 0, 3])


def test_lazy_mode_keeps_two_states_ahead_for_a_mamba_group() -> None:
    # full attention: a step's 64 tokens in blocks of 4 (16); mamba: two states; doubled
    assert lazy_target_blocks(layout(9), 64) == (16 + 2) * 2


def test_a_mamba_group_in_another_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mamba group not in 'align' mode"):
        mamba_offload_scheduler(mode="none")
