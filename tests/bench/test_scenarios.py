"""The twin's side of every scenario runs, leaves sane state, and needs no vLLM."""

from __future__ import annotations

import pytest

import workloads
from conformance.bench import scenarios
from conformance.bench.systems import HASH_ALGOS


@pytest.mark.parametrize("op", scenarios.POOL_OPS)
def test_pool_ops_cover_every_usable_block(op: str) -> None:
    state = scenarios.PoolOp("impl", 16 * 4 + 1, op)
    tail_first = [b.block_id for batch in state.batches for b in reversed(batch)]
    state.run()
    pool = state.pool
    pool.check_integrity()
    free = pool.get_num_free_blocks()
    assert state.work == 64
    assert free == (64 if op == "free_blocks" else 0)
    if op == "evict":
        assert pool.get_num_cached_blocks() == 0
    if op == "touch":
        assert all(b.ref_cnt == 1 for b in pool.blocks[1:])
    if op == "free_blocks":  # each request's blocks queued tail first, as upstream frees them
        assert pool.free_block_queue.block_ids() == tail_first


def test_unknown_pool_op_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown pool op"):
        scenarios.PoolOp("impl", 17, "defrag")


@pytest.mark.parametrize("algo", HASH_ALGOS)
def test_hash_prompt_hashes_every_full_block(algo: str) -> None:
    state = scenarios.HashPrompt("impl", algo, 32, num_tokens=100)
    hashes = state.run()
    assert len(hashes) == 3 and len(set(hashes)) == 3
    assert state.run() == hashes  # the request is not mutated: runs repeat


def test_decode_keeps_n_requests_decoding() -> None:
    state = scenarios.Decode("impl", 4)
    running = state.loop.scheduler.running
    assert len(running) == 4
    assert all(r.num_computed_tokens == r.num_tokens - 1 for r in running)
    before = [r.num_tokens for r in running]
    state.run()
    assert [r.num_tokens for r in state.loop.scheduler.running] == [n + 1 for n in before]
    state.top_up()
    assert state.loop.num_running == 4


def test_admission_admits_every_arrival_with_a_prefix_hit() -> None:
    state = scenarios.Admission("impl", n=3, prefix=64, suffix=16)
    state.run()
    scheduler = state.loop.scheduler
    assert len(scheduler.running) == 3
    assert all(r.num_cached_tokens == 64 for r in scheduler.running)


def test_chunked_prefill_takes_exactly_the_chunks_it_needs() -> None:
    state = scenarios.ChunkedPrefill("impl", n=2, prompt=256, budget=64)
    state.run()
    assert state.work == state.loop.steps == 8
    assert state.loop.scheduled_tokens == 512 and not state.loop.has_requests()


def test_replay_runs_a_workload_to_completion() -> None:
    workload = workloads.generate("decode-heavy", 0, 0.2)
    state = scenarios.Replay("impl", workload)
    steps, tokens = state.run()
    assert steps == state.work > 0 and tokens > 0
    assert not state.loop.has_requests()
