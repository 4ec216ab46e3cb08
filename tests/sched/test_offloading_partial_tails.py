"""Mamba partial tails on the OffloadingConnector (`impl.connector.offloading.partial_tails`),
inside the scheduler, with exact block ids and CPU slots: a prompt's last state inside a block
is stored from its copy-on-write, a resend loads it past the whole chunks, and the scheduler
weighs a CPU hit against a local sub-block tail.

Layout: full attention and mamba ('align'), blocks of 8 tokens hashed every 4, one block per
chunk, a CPU tier of 32 chunks. A 15-token prompt's last reusable state is at 12 (inside its
second block)."""

from __future__ import annotations

import pytest

from impl.connector.offloading.partial_tails import partial_tail_tokens
from impl.connector.types import OffloadingSettings, OffloadLimits
from impl.core.events import BlockStored
from impl.core.mamba_boundaries import BoundaryState
from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.test_offloading_connector import connector, run_step
from vtwin.errors import ReleaseCheckFailed

BLOCK, HASH = 8, 4
ALIGN = MambaSpec(BLOCK, mamba_cache_mode="align")
PROMPT = range(10, 25)  # 15 tokens: the last reusable state at 12
LONG = range(10, 41)  # 31 tokens sharing PROMPT's first 15: the last state at 28


def scheduler_with(num_blocks: int = 11, blocks_per_chunk: int = 1,
                   kv_connector: object | None = None, hash_block: int = HASH) -> Scheduler:
    config = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64, block_size=BLOCK,
        hash_block_size=hash_block,
        kv_connector=kv_connector or OffloadingSettings(32, blocks_per_chunk))  # type: ignore[arg-type]
    kv_config = KVCacheConfig(num_blocks, (KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
                                           KVCacheGroupSpec(("mamba",), ALIGN)))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def drain(scheduler: Scheduler, steps: int) -> None:
    """`steps` steps, the worker finishing every job and every load in flight."""
    for _ in range(steps):
        waiting = tuple(r for r, request in scheduler.requests.items()
                        if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS)
        run_step(scheduler, done=tuple(connector(scheduler).jobs), loaded=waiting)


def stored_then_evicted() -> Scheduler:
    """`a` (PROMPT) runs, its chunks and its tail at 12 reach the CPU tier, then a filler
    evicts its GPU blocks: a resend finds its prefix on the CPU only."""
    scheduler = scheduler_with()
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=2))
    drain(scheduler, 4)
    scheduler.add_request(make_request("f", range(100, 156), HASH, max_tokens=1))
    drain(scheduler, 3)
    return scheduler


def test_partial_tails_need_one_block_chunks_one_block_size_and_no_other_window() -> None:
    shapes = connector(scheduler_with()).shapes
    assert partial_tail_tokens(shapes, 1, HASH) == BLOCK
    assert partial_tail_tokens(shapes, 2, HASH) == 0  # chunks of two blocks
    assert partial_tail_tokens(shapes, 1, BLOCK) == 0  # hashed at the block: no tail inside
    assert partial_tail_tokens(shapes[:1], 1, HASH) == 0  # no mamba group
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, hash_block_size=HASH,
                             kv_connector=OffloadingSettings(32, 1))
    three = Scheduler(config, KVCacheConfig(16, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("window",), SlidingWindowSpec(BLOCK, sliding_window=16)),
        KVCacheGroupSpec(("mamba",), ALIGN))), none_hash=NONE_HASH, log_stats=True)
    assert connector(three).partial_tail_tokens == 0  # a sliding window beside it


def test_the_copy_of_a_producers_tail_is_stored_under_the_boundary_in_every_group() -> None:
    """Step 1 computes 8 tokens (a whole block, stored as chunks); step 2 the 4 up to the
    last hash boundary, keyed inside block 1 (partial tail); step 3 would overwrite the
    state, so the cache moves the entry to a copy (4 -> 5) and offers the copy: one job
    stores boundary 12 from the full group's table block 3 and the mamba copy 5."""
    scheduler = scheduler_with()
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=2))
    drain(scheduler, 2)
    output, meta = run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert output.kv_cache_block_copies == [(4, 5)]
    assert output.boundary_states == [BoundaryState("a", 1, 5, 12)]
    (job_id, job), = meta.store_jobs.items()
    assert (job_id, job.gpu.block_ids, job.gpu.group_sizes, job.gpu.block_indices,
            job.cpu_slots) == (2, (3, 5), (1, 1), (1, 1), (2, 3))
    assert connector(scheduler).jobs[2].fence == (3, 5)  # both sources watched at once


def test_a_resend_loads_the_tail_past_the_whole_chunks() -> None:
    """After `a` is stored and a filler evicts its GPU blocks, a resend hits chunk 0 (8
    tokens) and the tail at 12: its load reads the full group's chunk 0 and boundary key,
    and the mamba state at 12 (slots 1, 2, 3), into blocks 5 and 4 and mamba block 3."""
    scheduler = stored_then_evicted()
    scheduler.add_request(make_request("b", PROMPT, HASH, max_tokens=2))
    _, meta = run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == [("b", 12)]
    (job,) = meta.load_jobs.values()
    assert (job.gpu.block_ids, job.gpu.group_sizes, job.gpu.block_indices, job.cpu_slots) == (
        (5, 4, 3), (2, 1), (0, 1), (1, 2, 3))
    assert connector(scheduler).requests["b"].partial_tail_boundary is None  # consumed


def _stored_long_then_tail_of_prompt(scheduler: Scheduler) -> None:
    """LONG stored (chunks to 24, its tail at 28), a filler evicting it from the GPU, then
    PROMPT computed (LONG's first chunk is no hit: its mamba state there was never kept), so
    the GPU holds PROMPT's sub-block tail at 12."""
    for req_id, prompt in (("long", LONG), ("f", range(100, 156)), ("a", PROMPT)):
        scheduler.add_request(make_request(req_id, prompt, HASH, max_tokens=1))
        drain(scheduler, 4)


def test_a_local_tail_at_least_as_long_as_the_cpu_hit_is_kept_and_copied() -> None:
    """PROMPT again: the GPU hit ends at 12 (4 tokens into block 1); the CPU tier, asked from
    8, finds the same 4 tokens, no more: nothing loads and the shared block is copied."""
    scheduler = scheduler_with(num_blocks=13)
    _stored_long_then_tail_of_prompt(scheduler)
    scheduler.add_request(make_request("again", PROMPT, HASH, max_tokens=1))
    output, meta = run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == []
    assert not meta.load_jobs
    (new,) = output.scheduled_new_reqs
    assert (new.num_computed_tokens, new.block_ids) == (12, ([2, 3], [0, 12]))
    assert output.kv_cache_block_copies == [(4, 3), (7, 12)]


def test_a_longer_cpu_hit_supersedes_the_local_tail() -> None:
    """LONG again: the GPU hit ends at 12 (PROMPT's tail); the CPU tier, asked from the
    whole block (8), has LONG's chunks to 24 and its tail at 28: the local hit is cut to 8
    and 20 tokens load, no block is copied."""
    scheduler = scheduler_with(num_blocks=13)
    _stored_long_then_tail_of_prompt(scheduler)
    scheduler.add_request(make_request("c", LONG, HASH, max_tokens=1))
    output, meta = run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == [("c", 20)]
    assert not output.kv_cache_block_copies
    (job,) = meta.load_jobs.values()
    assert (job.gpu.block_ids, job.gpu.group_sizes, job.gpu.block_indices, job.cpu_slots) == (
        (3, 12, 11, 10), (3, 1), (1, 3), (2, 3, 4, 5))
    assert scheduler.kv_cache_manager.get_block_ids("c")[0][0] == 2  # the local whole block


def test_a_tail_past_the_requests_offload_cap_stops_as_upstream_does() -> None:
    scheduler = scheduler_with()
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=2,
                                       offload_limits=OffloadLimits(None, 8)))
    drain(scheduler, 2)
    with pytest.raises(ReleaseCheckFailed, match="offloading-partial-tail-past-cap"):
        scheduler.schedule()


def _eagle_scheduler() -> Scheduler:
    """EAGLE (one draft) beside mamba 'align' under sparse retention: the prompt's tail state
    lies a hash block below the last boundary before its final token."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, hash_block_size=HASH, num_spec_tokens=1,
                             num_lookahead_tokens=1, spec_method="eagle",
                             kv_connector=OffloadingSettings(32, 1))
    kv_config = KVCacheConfig(16, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("mamba",), MambaSpec(BLOCK, mamba_cache_mode="align",
                                               num_speculative_blocks=1))),
        prefix_cache_retention_interval=0)
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def test_a_whole_block_tail_sparse_retention_left_unkeyed_is_offered_when_keyed() -> None:
    """PROMPT under EAGLE: its tail state is at 8, a whole block, which sparse retention does
    not keep (no replay boundary there); the cache call that reaches 8 keys it as the tail
    and offers it in that same call, so it is stored (job 0) with the chunk (job 1)
    (`conformance/regressions/offloading-mamba-whole-tail-offered.events.jsonl`)."""
    scheduler = _eagle_scheduler()
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=2))
    output, meta = run_step(scheduler)
    assert output.num_scheduled_tokens == {"a": 8}
    assert output.boundary_states == [BoundaryState("a", 1, 3, 8)]
    assert [(job.gpu.block_ids, job.gpu.group_sizes) for job in meta.store_jobs.values()] == [
        ((3,), (0, 1)), ((1,), (1, 0))]


def test_a_tail_being_written_is_passed_over_for_the_whole_chunks() -> None:
    """`a`'s partial-tail store (job 2) is still in flight when a resend looks it up: the
    boundary at 12 is not readable yet, so the hit is the whole chunk alone (8)."""
    scheduler = scheduler_with()
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=2))
    for _ in range(4):
        run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    assert 2 in connector(scheduler).jobs
    scheduler.add_request(make_request("f", range(100, 156), HASH, max_tokens=1))
    for _ in range(3):
        run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    scheduler.add_request(make_request("b", PROMPT, HASH, max_tokens=2))
    run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    assert scheduler.step_external_hits == [("b", 8)]


def test_a_tail_is_never_looked_up_at_the_prompts_last_token() -> None:
    """A 12-token prompt (PROMPT's first 12) after `a` stored its tail at 12: the tail would
    cover the whole prompt, whose last token must be computed again, so the hit is chunk 0."""
    scheduler = stored_then_evicted()
    scheduler.add_request(make_request("p", range(10, 22), HASH, max_tokens=2))
    run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == [("p", 8)]


def test_a_longer_prompt_loads_a_shorter_ones_tail_in_place_of_its_chunk() -> None:
    """LONG after `a` (PROMPT) was stored and evicted: LONG's chunk 1 (to 16) is not on the
    CPU, but PROMPT's tail at 12 is: the load reads chunk 0 and the boundary's keys (slots 1,
    2, 3), not LONG's own key for chunk 1, which is keyed but absent."""
    scheduler = stored_then_evicted()
    scheduler.add_request(make_request("long", LONG, HASH, max_tokens=1))
    _, meta = run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == [("long", 12)]
    (job,) = meta.load_jobs.values()
    assert (job.gpu.group_sizes, job.cpu_slots) == ((2, 1), (1, 2, 3))


def test_the_rightmost_readable_boundary_inside_the_block_is_the_hit() -> None:
    """Hashes of 2 tokens: an 11-token prompt stores its tail at 10, PROMPT (15) its tail at
    14; a resend of PROMPT after both are evicted hits 14, the rightmost of 14, 12 (absent)
    and 10."""
    scheduler = scheduler_with(num_blocks=12, hash_block=2)
    for req_id, prompt in (("short", range(10, 21)), ("a", PROMPT)):
        scheduler.add_request(make_request(req_id, prompt, 2, max_tokens=2))
        drain(scheduler, 4)
    scheduler.add_request(make_request("f", range(100, 156), 2, max_tokens=1))
    drain(scheduler, 3)
    scheduler.add_request(make_request("b", PROMPT, 2, max_tokens=2))
    run_step(scheduler, done=tuple(connector(scheduler).jobs))
    assert scheduler.step_external_hits == [("b", 14)]


def test_a_store_reading_a_block_handed_out_as_a_copy_is_flushed() -> None:
    """A pool of 10 blocks. `a`'s partial-tail store (job 2) reads its full block 3 and is
    still in flight when `a` finishes; `b` (39 tokens) later stops its prompt on its own tail
    at 36 and copies it before overwriting it: the copy is block 3, handed out again, so
    job 2 is flushed in that step (the copy is in no block table: only the step's copies
    say so)."""
    scheduler = scheduler_with(num_blocks=10)
    scheduler.add_request(make_request("a", PROMPT, HASH, max_tokens=1))
    for _ in range(5):
        run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    scheduler.add_request(make_request("b", range(300, 339), HASH, max_tokens=2))
    for _ in range(2):
        run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    output, meta = run_step(scheduler, done=tuple(j for j in connector(scheduler).jobs if j != 2))
    assert output.kv_cache_block_copies == [(5, 3)]
    assert meta.jobs_to_flush == {2}


def test_a_stored_tail_is_described_up_to_its_boundary() -> None:
    """With self-describing KV events, a's tail at 12 is announced by full attention as the
    hash block from its block's start (8) to the boundary: tokens 8..11 at the hash block
    size, parented on the hash at 8; the mamba group's key stays plain."""
    config = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64, block_size=BLOCK,
        hash_block_size=HASH, enable_kv_cache_events=True,
        kv_connector=OffloadingSettings(32, 1, self_describing_kv_events=True))
    groups = (KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
              KVCacheGroupSpec(("mamba",), ALIGN))
    scheduler = Scheduler(config, KVCacheConfig(11, groups), none_hash=NONE_HASH,
                          log_stats=True)
    a = make_request("a", PROMPT, HASH, max_tokens=2)
    scheduler.add_request(a)
    stored: list[BlockStored] = []
    for _ in range(4):
        drain(scheduler, 1)
        stored += [e for e in scheduler.take_events()
                   if isinstance(e, BlockStored) and e.medium == "CPU"]
    h = a.block_hashes
    assert BlockStored((h[2],), h[1], (18, 19, 20, 21), HASH, None, 0, medium="CPU") in stored
    assert BlockStored((h[2],), None, (), 0, None, 1, medium="CPU") in stored
