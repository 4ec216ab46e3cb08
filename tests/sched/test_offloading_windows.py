"""The OffloadingConnector over windowed groups (`impl.connector.offloading.windows`): how many
chunks a hit needs, the right-to-left run search, which blocks are worth storing, and, inside
the scheduler with a full-attention group beside a sliding window, exact store and load jobs
(the window's tail only under sparse retention, loads of the window's chunks only)."""

from __future__ import annotations

import pytest

from impl.connector.offloading.jobs import OffloadingMetadata
from impl.connector.offloading.keys import LookupResult
from impl.connector.offloading.windows import (
    check_offloading_supported,
    load_window,
    store_mask,
    window_in_chunks,
    window_lookup,
)
from impl.connector.types import OffloadingSettings
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.output import SchedulerOutput
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.test_offloading_connector import connector, run_step

H, P, M = LookupResult.HIT, LookupResult.HIT_PENDING, LookupResult.MISS


class Answers:
    """A manager stand-in answering lookups from a list, recording what was asked."""

    def __init__(self, answers: list[LookupResult]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def lookup(self, key: int) -> LookupResult:
        self.asked.append(key)
        return self.answers[key]


def lookup(answers: list[LookupResult], window: int, first: int | None = None) -> int | None:
    return window_lookup(Answers(answers), list(range(len(answers))),  # type: ignore[arg-type]
                         window, first or window)


def test_chunks_a_hit_needs_per_group_kind() -> None:
    # a window of 33 tokens reads 32 tokens back: two 32-token chunks (W itself rounds up)
    assert window_in_chunks(SlidingWindowSpec(16, sliding_window=33), 32) == 2
    assert window_in_chunks(SlidingWindowSpec(16, sliding_window=32), 16) == 2
    assert window_in_chunks(SlidingWindowSpec(16, sliding_window=17), 16) == 2
    assert window_in_chunks(ChunkedLocalAttentionSpec(16, attention_chunk_size=64), 32) == 2
    assert window_in_chunks(FullAttentionSpec(16), 32) is None


def test_a_hit_ending_inside_a_chunk_may_need_one_chunk_more_on_the_left() -> None:
    window = SlidingWindowSpec(16, sliding_window=40)  # 3 chunks of 16
    assert load_window(window, 3, 16, 48) == 3  # ends on a chunk boundary
    assert load_window(window, 3, 16, 33) == 4  # 39 tokens before token 33 start in chunk 0
    local = ChunkedLocalAttentionSpec(16, attention_chunk_size=32)
    assert load_window(local, 2, 16, 33) == 2
    assert load_window(FullAttentionSpec(16), None, 16, 33) is None


@pytest.mark.parametrize("answers, window, first, expected", [
    ([H, H, H, H], 2, None, 4),  # the run touching the right end
    ([H, H, M, H], 2, None, 2),  # a gap: the run left of it
    ([H, H, H, M, H, H], 2, 3, 3),  # the right-end run needs 3; the next run only 2
    ([M, H], 2, None, 0),  # no run long enough: the run at the left end (none)
    ([H], 2, None, 1),  # ... or as long as it gets
    ([H, P, H], 2, None, None),  # a chunk of the deciding run is still being written
    ([H, H, M, P], 2, None, 2),  # one right of a gap does not decide anything
])
def test_the_window_search_runs_right_to_left(answers: list[LookupResult], window: int,
                                              first: int | None,
                                              expected: int | None) -> None:
    assert lookup(answers, window, first) == expected


def test_the_search_stops_asking_once_a_run_decides() -> None:
    manager = Answers([H, H, H, H, H])
    assert window_lookup(manager, [0, 1, 2, 3, 4], 2, 2) == 5  # type: ignore[arg-type,list-item]
    assert manager.asked == [4, 3]


def test_store_mask_keeps_the_window_before_every_aligned_boundary() -> None:
    window = SlidingWindowSpec(4, sliding_window=5)  # 1 block before a hit
    # boundaries every 2 blocks: the block before each
    assert store_mask(window, 0, 6, alignment_tokens=8, final_end_block=None,
                      retention_interval=None, boundaries=()) == [
        False, True, False, True, False, True]
    # the request's last segment ends at block 5 (partial): its tail is kept too
    assert store_mask(window, 0, 6, alignment_tokens=8, final_end_block=5,
                      retention_interval=None, boundaries=()) == [
        False, True, False, True, True, True]
    # a window needing a whole segment keeps everything; so does a boundary inside a block
    wide = SlidingWindowSpec(4, sliding_window=9)
    assert store_mask(wide, 0, 6, alignment_tokens=8, final_end_block=None,
                      retention_interval=None, boundaries=()) is None
    assert store_mask(window, 0, 6, alignment_tokens=6, final_end_block=None,
                      retention_interval=None, boundaries=()) is None
    for dense in (FullAttentionSpec(4), ChunkedLocalAttentionSpec(4, attention_chunk_size=8)):
        assert store_mask(dense, 0, 6, alignment_tokens=8, final_end_block=None,
                          retention_interval=None, boundaries=()) is None


def test_store_mask_under_sparse_retention_keeps_the_reachable_tails_only() -> None:
    window = SlidingWindowSpec(4, sliding_window=9)  # 2 blocks before a hit
    # the replay boundary 22 (aligned down to 16: block 4) and a junction at 9 (block 2)
    assert store_mask(window, 0, 6, alignment_tokens=8, final_end_block=6,
                      retention_interval=0, boundaries=(22, 9)) == [
        True, True, True, True, False, False]
    assert store_mask(window, 3, 6, alignment_tokens=8, final_end_block=None,
                      retention_interval=0, boundaries=(22,)) == [True, False, False]


def test_mamba_none_and_bounded_replay_groups_are_refused() -> None:
    for spec in (MambaSpec(block_size=4), SlidingWindowSpec(4, sliding_window=8,
                                                            bounded_replay=True)):
        config = KVCacheConfig(10, (KVCacheGroupSpec(("full",), FullAttentionSpec(4)),
                                    KVCacheGroupSpec(("other",), spec)))
        with pytest.raises(ValueError, match="group 1.*not implemented by the twin"):
            check_offloading_supported(config, 4)


BLOCK = 4


def hybrid_scheduler(retention: int | None, window: int = 5, num_blocks: int = 24) -> Scheduler:
    """Full attention beside a sliding window of `window` tokens, blocks of 4, one block per
    chunk, a CPU tier of 32 chunks."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, kv_connector=OffloadingSettings(32, 1))
    kv_config = KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("window",), SlidingWindowSpec(BLOCK, sliding_window=window))),
        prefix_cache_retention_interval=retention)
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def store_then_evict(scheduler: Scheduler, prompt: range) -> None:
    """`a` (`prompt`) runs and is stored to the CPU tier; then a filler takes the GPU pool
    (of 9 blocks), evicting a's cached blocks, so a resend of the prompt loads from the CPU."""
    scheduler.add_request(make_request("a", prompt, BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(0,))
    scheduler.add_request(make_request("filler", range(100, 115), BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(1,))


def test_sparse_retention_stores_only_the_windows_tail_before_the_replay() -> None:
    """A 13-token prompt: three full chunks of the full-attention group; of the window (one
    block before a hit) only the chunk before the replay boundary (12 tokens: chunk 2)."""
    scheduler = hybrid_scheduler(retention=0)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    output, meta = run_step(scheduler)
    full, window = output.scheduled_new_reqs[0].block_ids
    (job,) = meta.store_jobs.values()
    assert job.gpu.block_ids == (*full[:3], window[2])
    assert job.gpu.group_sizes == (3, 1)
    assert job.gpu.block_indices == (0, 2)
    state = connector(scheduler)
    assert state.watched_blocks == {window[2]: {0}}  # a window's block is watched at once


def test_dense_retention_stores_every_window_chunk() -> None:
    scheduler = hybrid_scheduler(retention=None)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    output, meta = run_step(scheduler)
    full, window = output.scheduled_new_reqs[0].block_ids
    (job,) = meta.store_jobs.values()
    assert job.gpu.block_ids == (*full[:3], *window[:3])
    assert connector(scheduler).watched_blocks == {b: {0} for b in window[:3]}
    run_step(scheduler, done=(0,))
    assert connector(scheduler).watched_blocks == {}  # the store is done: unwatched


def test_a_hit_loads_the_windows_chunks_only() -> None:
    """The prompt goes to the CPU tier, its GPU blocks are evicted by a filler, and a resend
    hits 12 tokens (the last token is computed again): the full-attention group loads its
    three chunks, the window (one block before token 12) only chunk 2."""
    scheduler = hybrid_scheduler(retention=None, num_blocks=9)
    store_then_evict(scheduler, range(10, 23))
    scheduler.add_request(make_request("b", range(10, 23), BLOCK, max_tokens=1))
    output, meta = run_step(scheduler)
    assert not output.scheduled_new_reqs  # it waits for its load
    (load,) = meta.load_jobs.values()
    assert load.gpu.group_sizes == (3, 1)
    assert load.gpu.block_indices == (0, 2)
    assert scheduler.requests["b"].num_computed_tokens == 12



def test_with_a_window_the_prompts_last_token_is_never_loaded() -> None:
    """A 12-token prompt (three whole chunks) stored, evicted and sent again: a window must
    still hold a hit after the last token is computed again, so the hit stops a token short
    (11 tokens), where full attention alone would load all 12. The window's load ends inside
    chunk 2, so it reads the 4 tokens before token 11 from chunks 1 and 2."""
    scheduler = hybrid_scheduler(retention=None, num_blocks=9)
    store_then_evict(scheduler, range(10, 22))
    scheduler.add_request(make_request("b", range(10, 22), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler)
    (load,) = meta.load_jobs.values()
    assert load.gpu.group_sizes == (3, 2)
    assert load.gpu.block_indices == (0, 1)
    assert scheduler.requests["b"].num_computed_tokens == 11


def a_then_b_sharing_its_prefix() -> tuple[Scheduler, tuple[SchedulerOutput,
                                                             OffloadingMetadata]]:
    """Under sparse retention, a (13 tokens) computed, cached and stored; then b, whose first
    9 tokens are a's, in one step: that step's output and metadata."""
    scheduler = hybrid_scheduler(retention=0)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(0,))
    scheduler.add_request(make_request("b", [*range(10, 19), *range(100, 108)], BLOCK,
                                       max_tokens=2))
    return scheduler, run_step(scheduler)


def test_sparse_retention_also_stores_the_window_before_a_shared_prefixs_junction() -> None:
    """b shares its first 9 tokens with a, which the GPU cache holds: b's lookup finds the
    junction where the two part (8 tokens, block-aligned), so a later request sharing that
    prefix stops there. b's stores keep the window's block before it (block 1) beside the one
    before its own replay boundary (16 tokens: block 3). Its full-attention chunks 0 and 1
    are a's, in the CPU tier already: only chunks 2 and 3 are stored."""
    scheduler, (output, meta) = a_then_b_sharing_its_prefix()
    assert scheduler.requests["b"].shared_prefix_boundary == 8
    full, window = output.scheduled_new_reqs[0].block_ids
    (job,) = meta.store_jobs.values()
    assert job.gpu.block_ids == (full[2], full[3], window[1], window[3])
    assert job.gpu.group_sizes == (2, 2)


def test_sparse_retention_caches_the_gpu_windows_tail_before_the_junction_too() -> None:
    """The GPU cache keeps the same tails as the CPU tier's stores: of b's window blocks,
    the one before the junction (block 1) and the one before its replay boundary (block 3)
    are cached, blocks 0 and 2 are not."""
    scheduler, _ = a_then_b_sharing_its_prefix()
    window = scheduler.kv_cache_manager.coordinator.managers[1].req_to_blocks["b"]
    assert [block.block_hash is not None for block in window[:4]] == [
        False, True, False, True]
