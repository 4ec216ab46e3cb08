"""The CPU offload tier (SimpleCPUOffloadConnector) beside a mamba 'align' group: eager mode
copies each state the cache keys by its block (`BoundaryState`) in the step that keys it, never
from the mirrored table by position (the mamba table nulls and relocates its entries); a hit
then loads the full-attention blocks and the one state where it ends.

Layout: full attention and mamba ('align'), blocks of 4 tokens, a CPU pool of 32 blocks."""

from __future__ import annotations

import pytest

from impl.connector.cpu_offload import SimpleCPUOffloadScheduler
from impl.connector.offload_lazy import lazy_target_blocks
from impl.connector.types import KVConnectorOutput, OffloadSettings
from impl.core.events import BlockStored
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


def fine_scheduler(lazy: bool, hash_block: int = 4) -> Scheduler:
    """Blocks of 8 hashed every 4 (sub-block hits), a GPU pool of 11, a CPU pool of 32."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=8, hash_block_size=hash_block,
                             kv_connector=OffloadSettings(32, lazy, "fail"))
    return Scheduler(config, KVCacheConfig(11, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(8)),
        KVCacheGroupSpec(("mamba",), MambaSpec(8, mamba_cache_mode="align")))),
        none_hash=NONE_HASH, log_stats=True)


def _stored_then_evicted(scheduler: Scheduler) -> KVConnectorOutput | None:
    """`a` (15 tokens: its prompt's last state at 12, inside its second block) runs and
    finishes, then a filler evicts its GPU blocks; stores complete a step after each event."""
    report: KVConnectorOutput | None = None
    for name, prompt in (("a", range(10, 25)), ("filler", range(100, 156))):
        scheduler.add_request(make_request(name, prompt, 4, max_tokens=2 if name == "a" else 1))
        for _ in range(4):
            report, _, _ = run_done(scheduler, report)
    return report


def test_eager_mode_stores_a_producers_tail_and_a_resend_loads_it() -> None:
    """Eager: `a`'s copy-on-write (4 -> 5) keeps its state at 12 and is stored at once
    (event 2: GPU 5 -> CPU 3); the finishing `a`'s full block holding the tail key is
    stored with its other keys. A resend hits the CPU pool at 12, inside the block: chunk 0,
    the full block keyed at 12, the state at 12."""
    scheduler = fine_scheduler(lazy=False)
    scheduler.add_request(make_request("a", range(10, 25), 4, max_tokens=2))
    report = None
    for _ in range(2):
        report, _, _ = run_done(scheduler, report)
    output, meta = run_step(scheduler, report)
    assert output.kv_cache_block_copies == [(4, 5)]
    assert output.boundary_states == [BoundaryState("a", 1, 5, 12)]
    assert (meta.store_event, meta.store_gpu_blocks, meta.store_cpu_blocks) == (2, [5], [3])
    scheduler = fine_scheduler(lazy=False)
    report = _stored_then_evicted(scheduler)
    scheduler.add_request(make_request("b", range(10, 25), 4, max_tokens=2))
    _, meta = run_step(scheduler, report)
    assert scheduler.step_external_hits == [("b", 12)]
    assert (meta.load_gpu_blocks, meta.load_cpu_blocks) == ([1, 6, 7], [2, 5, 3])


def test_only_eager_mode_looks_up_sub_block_hits_in_the_cpu_pool() -> None:
    """Upstream builds the CPU pool's coordinator with partial hash hits in eager mode only:
    lazy mode's copies are whole evicted blocks, looked up on the scheduler block."""
    from impl.connector.cpu_offload import SimpleCPUOffloadScheduler

    for lazy, sub_block in ((False, True), (True, False)):
        connector = fine_scheduler(lazy).connector
        assert isinstance(connector, SimpleCPUOffloadScheduler)
        assert connector.cpu_coordinator.sub_block_hits is sub_block
        assert connector.cpu_coordinator.cache_hit_alignment == (4 if sub_block else 8)


def test_a_finishing_request_stores_the_full_block_its_prompts_tail_falls_in() -> None:
    """Eager, `a` (15 tokens) sampling one token: its second full-attention block (GPU 3) is
    never full, so the positional scan never stores it; it carries the key of the prompt's
    tail at 12, so the finish queues it (event 3: GPU 3 -> CPU 4)."""
    scheduler = fine_scheduler(lazy=False)
    scheduler.add_request(make_request("a", range(10, 25), 4, max_tokens=1))
    report = None
    for _ in range(3):
        report, _, _ = run_done(scheduler, report)
    _, gpu, cpu = run_done(scheduler, report)
    assert (gpu, cpu) == ([3], [4])


def test_the_finish_looks_for_the_tail_key_at_the_prompts_last_hash_boundary() -> None:
    """Hashes of 2, a 14-token prompt: the GPU keys the tail at 12 (a resend must compute
    the last token), but the finish looks for a key at 14, the last hash boundary within
    the prompt, as upstream does; the block has none there, so nothing more is stored."""
    scheduler = fine_scheduler(lazy=False, hash_block=2)
    scheduler.add_request(make_request("a", range(10, 24), 2, max_tokens=1))
    report = None
    stored = []
    for _ in range(5):
        report, gpu, _ = run_done(scheduler, report)
        stored.append(gpu)
    assert stored == [[2], [1], [5], [], []]


@pytest.mark.parametrize(("num_cpu_blocks", "stored"), [(2, [4]), (3, [4, 8])])
def test_states_offered_together_are_stored_while_the_cpu_pool_has_room(
        num_cpu_blocks: int, stored: list[int]) -> None:
    """a and b prefill 12 tokens each in one step and both key their state at 12 (blocks 4
    and 8): a CPU pool with one free block stores a's alone (b's offer is dropped, not
    retried), one with two stores both, in offer order."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK,
                             kv_connector=OffloadSettings(num_cpu_blocks, False, "fail"))
    scheduler = Scheduler(config, layout(16), none_hash=NONE_HASH, log_stats=True)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    scheduler.add_request(make_request("b", range(50, 63), BLOCK, max_tokens=1))
    output, meta = run_step(scheduler)
    assert output.boundary_states == [BoundaryState("a", 1, 4, 12), BoundaryState("b", 1, 8, 12)]
    assert (meta.store_gpu_blocks, meta.store_cpu_blocks) == (stored, [1, 2][:len(stored)])


def test_a_mamba_group_listed_first_does_not_hide_the_attention_blocks_after_it() -> None:
    """The layout in the other order (mamba, then full attention): the state at 12 (block 1)
    goes at once, the attention blocks 2..4 a step later, as in the usual order."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, kv_connector=OffloadSettings(32, False, "fail"))
    scheduler = Scheduler(config, KVCacheConfig(9, (
        KVCacheGroupSpec(("mamba",), MambaSpec(BLOCK, mamba_cache_mode="align")),
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)))),
        none_hash=NONE_HASH, log_stats=True)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    done, gpu, cpu = run_done(scheduler, None)
    assert (gpu, cpu) == ([1], [1])
    assert run_done(scheduler, done)[1:] == ([2, 3, 4], [2, 3, 4])


def test_a_finishing_requests_tail_block_is_announced_by_its_keys_alone() -> None:
    """With KV events on, a's full-attention block holding its prompt's tail at 12 (never
    full, stored as a finishes) is announced on the CPU by the key it carries, without a
    payload (nothing was captured: it is keyed by its block when the copy completes)."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=8, hash_block_size=4, enable_kv_cache_events=True,
                             kv_connector=OffloadSettings(32, False, "fail"))
    scheduler = Scheduler(config, KVCacheConfig(11, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(8)),
        KVCacheGroupSpec(("mamba",), MambaSpec(8, mamba_cache_mode="align")))),
        none_hash=NONE_HASH, log_stats=True)
    a = make_request("a", range(10, 25), 4, max_tokens=1)  # block 1 never fills
    scheduler.add_request(a)
    report = None
    announced: list[BlockStored] = []
    for _ in range(6):
        report, _, _ = run_done(scheduler, report)
        announced += [e for e in scheduler.take_events()
                      if isinstance(e, BlockStored) and e.medium == "CPU" and e.group_id == 0]
    assert BlockStored((a.block_hashes[2],), None, (), 8, None, 0, medium="CPU") in announced


def test_under_dcp_the_cpu_pool_hits_inside_a_block_as_the_gpu_does() -> None:
    """DCP 2 beside mamba 'align' (blocks of 4, full attention's spanning 8 tokens): the state
    is as wide as the hash block, so both pools hit inside a full-attention block, and a
    finishing request stores the block its prompt's last hash boundary (12) falls inside.
    (The CPU pool once lost the DCP ranks: `conformance/regressions/
    dcp-mamba-cpu-tier-prompt-tail.jsonl`.)"""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, hash_block_size=BLOCK,
                             decode_context_parallel_size=2, kv_connector=OffloadSettings(32))
    scheduler = Scheduler(config, layout(12), none_hash=NONE_HASH, log_stats=True)
    assert isinstance(scheduler.connector, SimpleCPUOffloadScheduler)
    assert scheduler.kv_cache_manager.coordinator.sub_block_hits
    assert scheduler.connector.cpu_coordinator.sub_block_hits
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    report, gpu_ids, _ = run_done(scheduler, None)  # 12 tokens: the state keyed at 12
    assert gpu_ids == [3]
    report, gpu_ids, _ = run_done(scheduler, report)  # the full block, a finishes
    assert gpu_ids == [1]
    _, gpu_ids, _ = run_done(scheduler, report)  # its prompt tail's block (tokens 8..16)
    assert gpu_ids == [2]


def test_a_finishing_prompt_tail_is_not_stored_without_a_free_cpu_block() -> None:
    """A CPU pool of 4 (3 usable) with no store reported done: the prefill's state, its full
    block and the finishing step's state pin all three, so the block the prompt's last hash
    boundary (12) falls inside is left unstored (with one more CPU block it is queued)."""
    def finish(num_cpu_blocks: int) -> list[list[int]]:
        config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                                 block_size=8, hash_block_size=4,
                                 kv_connector=OffloadSettings(num_cpu_blocks))
        scheduler = Scheduler(config, KVCacheConfig(11, (
            KVCacheGroupSpec(("full",), FullAttentionSpec(8)),
            KVCacheGroupSpec(("mamba",), MambaSpec(8, mamba_cache_mode="align")))),
            none_hash=NONE_HASH, log_stats=True)
        scheduler.add_request(make_request("a", range(10, 23), 4, max_tokens=1))
        for _ in range(3):
            run_step(scheduler)
        connector = scheduler.connector
        assert isinstance(connector, SimpleCPUOffloadScheduler)
        return [queued.gpu_block_ids for queued in connector.pending_finished_stores]

    assert finish(5) == [[3]]
    assert finish(4) == []
