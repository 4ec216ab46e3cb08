"""The OffloadingConnector beside a mamba 'align' group: a hit reads one state (the one ending
where the hit ends), the cache offers each state it keys by block (`BoundaryState`), and the
connector stores those in jobs of their own, before the step's chunk stores.

Layout: full attention and mamba ('align'), blocks of 4 tokens, one block per chunk unless
said otherwise, a CPU tier of 32 chunks."""

from __future__ import annotations

from impl.connector.offloading.windows import (
    is_offloadable,
    mamba_align_tokens,
    store_mask,
    window_in_chunks,
)
from impl.connector.types import OffloadingSettings
from impl.core.mamba_boundaries import BoundaryState
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.test_offloading_connector import connector, run_step

BLOCK = 4
ALIGN = MambaSpec(BLOCK, mamba_cache_mode="align")


def mamba_scheduler(num_blocks: int = 24, blocks_per_chunk: int = 1) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK,
                             kv_connector=OffloadingSettings(32, blocks_per_chunk))
    kv_config = KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("mamba",), ALIGN)))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def test_only_align_mode_is_offloaded_and_a_hit_needs_one_state() -> None:
    assert is_offloadable(ALIGN)
    assert not is_offloadable(MambaSpec(BLOCK))  # 'none': one state per request, no cache
    assert window_in_chunks(ALIGN, 8) == 1


def test_store_mask_keeps_every_state_unless_retention_is_sparse() -> None:
    assert store_mask(ALIGN, 0, 8, alignment_tokens=4, final_end_block=None,
                      retention_interval=None, boundaries=(30,)) is None
    # Retention 0: only the state at the replay boundary (30, aligned down to 28: block 6)
    # and at a junction (9 -> 8: block 1).
    assert store_mask(ALIGN, 0, 8, alignment_tokens=4, final_end_block=None,
                      retention_interval=0, boundaries=(30, 9)) == [
        False, True, False, False, False, False, True, False]
    # An interval of 12 tokens: the state ending each segment (blocks 2 and 5) as well.
    assert store_mask(ALIGN, 2, 8, alignment_tokens=4, final_end_block=None,
                      retention_interval=12, boundaries=(30,)) == [
        True, False, False, True, True, False]
    # An interval of one block: every state ends a segment.
    assert store_mask(ALIGN, 0, 4, alignment_tokens=4, final_end_block=None,
                      retention_interval=4, boundaries=()) is None


def test_the_hit_ends_on_a_whole_mamba_chunk() -> None:
    scheduler = mamba_scheduler(blocks_per_chunk=2)
    assert mamba_align_tokens(connector(scheduler).shapes) == 8


def test_each_keyed_state_is_stored_in_a_job_of_its_own_before_the_chunk_stores() -> None:
    """A 13-token prompt: mamba 'align' schedules 12 (a whole block), whose state (block 4,
    index 2) the cache keys at 12. Job 0 stores that state, its block watched at once (the
    table retires it as the request moves on); job 1 the full-attention chunks, with nothing
    of the mamba group."""
    scheduler = mamba_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    output, meta = run_step(scheduler)
    assert output.scheduled_new_reqs[0].block_ids == ([1, 2, 3], [0, 0, 4])
    assert output.boundary_states == [BoundaryState("a", 1, 4, 12)]
    state_job, chunk_job = meta.store_jobs[0], meta.store_jobs[1]
    assert (state_job.gpu.block_ids, state_job.gpu.group_sizes,
            state_job.gpu.block_indices) == ((4,), (0, 1), (0, 2))
    assert (chunk_job.gpu.block_ids, chunk_job.gpu.group_sizes,
            chunk_job.gpu.block_indices) == ((1, 2, 3), (3, 0), (0, 0))
    assert connector(scheduler).watched_blocks == {4: {0}}


def test_a_state_that_does_not_end_a_chunk_is_not_stored() -> None:
    """Chunks of two blocks: the state at 12 tokens ends inside chunk 1, so no hit could load
    it (hits end on whole mamba chunks); only the full-attention chunk 0 is stored."""
    scheduler = mamba_scheduler(blocks_per_chunk=2)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    output, meta = run_step(scheduler)
    assert output.boundary_states == [BoundaryState("a", 1, 4, 12)]
    (job,) = meta.store_jobs.values()
    assert (job.gpu.block_ids, job.gpu.group_sizes) == ((1, 2), (2, 0))


def test_a_hit_loads_the_full_chunks_and_the_one_state_at_its_end() -> None:
    """a's prompt is stored, a filler evicts its GPU blocks, and b resends it: the hit stops
    before the last token (12 tokens, a whole mamba chunk) and loads three full-attention
    chunks and the state at 12 into the mamba table's block at index 2."""
    scheduler = mamba_scheduler(num_blocks=9)
    pending: tuple[int, ...] = ()
    for prompt in (range(10, 23), range(100, 115)):
        scheduler.add_request(make_request(f"r{prompt.start}", prompt, BLOCK, max_tokens=1))
        for _ in range(3):
            _, meta = run_step(scheduler, done=pending)
            pending = tuple(meta.store_jobs)
    scheduler.add_request(make_request("b", range(10, 23), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler)
    (load,) = meta.load_jobs.values()
    assert (load.gpu.block_ids, load.gpu.group_sizes, load.gpu.block_indices) == (
        (3, 4, 2, 1), (3, 1), (0, 2))
    assert scheduler.requests["b"].num_computed_tokens == 12
    assert scheduler.kv_cache_manager.get_block_ids("b") == ([3, 4, 2], [0, 0, 1])


def test_a_hit_must_end_on_a_whole_mamba_chunk_before_the_prompts_last_token() -> None:
    """Chunks of two blocks (8 tokens). a's 16-token prompt stores the state at 16 (a whole
    chunk); a filler evicts part of a's GPU blocks. b resends the prompt: its hit must stop
    before token 16, and a mamba state only exists at chunk ends, so it is rounded down to 8,
    which the GPU still holds: no load. Loading the state at 16 for a 15-token hit would
    resume the recurrence one token too far."""
    scheduler = mamba_scheduler(num_blocks=9, blocks_per_chunk=2)
    pending: tuple[int, ...] = ()
    stored = []
    for name, prompt, max_tokens in (("a", range(10, 26), 2), ("filler", range(100, 115), 1)):
        scheduler.add_request(make_request(name, prompt, BLOCK, max_tokens=max_tokens))
        for _ in range(4):
            output, meta = run_step(scheduler, done=pending)
            stored.extend(output.boundary_states)
            pending = tuple(meta.store_jobs)
    assert BoundaryState("a", 1, 6, 16) in stored
    scheduler.add_request(make_request("b", range(10, 26), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler, done=pending)
    assert meta.load_jobs == {}
    assert scheduler.requests["b"].num_computed_tokens == 8
