"""The CPU offload tier's own KV events (`impl.connector.offload_events`), with exact hashes,
tokens and parents: stored when a copy completes (payload captured when the store was
chosen), removed when the CPU pool evicts a copy, nothing with events off.

Layout: full attention, blocks of 4 tokens, a GPU pool of 16; prompts of 13 tokens (three
full blocks), a sampled token of 7 per step (`run_step`)."""

from __future__ import annotations

import pytest

from impl.connector.offload_events import (
    StoredBlockMeta,
    capture_block_meta,
    on_tier,
    stored_events,
)
from impl.connector.types import KVConnectorOutput, OffloadSettings
from impl.core.block import KVCacheBlock
from impl.core.events import BlockRemoved, BlockStored, KVCacheEvent
from impl.core.hashing import hashes_at_block_size
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.offload_helpers import BLOCK, run_step, stores_done
from vtwin.errors import ReleaseCheckFailed


def events_scheduler(num_cpu_blocks: int = 32, lazy: bool = False,
                     events: bool = True) -> Scheduler:
    return make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                          enable_kv_cache_events=events,
                          kv_connector=OffloadSettings(num_cpu_blocks, lazy, "fail"))


def cpu_events(scheduler: Scheduler) -> list[KVCacheEvent]:
    return [e for e in scheduler.take_events()
            if not isinstance(e, BlockStored | BlockRemoved) or e.medium == "CPU"]


def run(scheduler: Scheduler, steps: int) -> list[list[KVCacheEvent]]:
    """`steps` steps, each store reported done in the next; the tier's events of each."""
    report: KVConnectorOutput | None = None
    seen = []
    for _ in range(steps):
        _, meta = run_step(scheduler, report)
        report = stores_done(meta.store_event) if meta.store_event >= 0 else None
        seen.append(cpu_events(scheduler))
    return seen


def test_a_completed_store_announces_each_block_with_its_tokens_parent_and_lora() -> None:
    """Chosen in step 1 (the prefill's blocks, confirmed), reported done in step 2: one
    stored event per block, in table order, medium CPU."""
    scheduler = events_scheduler()
    a = make_request("a", range(10, 23), BLOCK, max_tokens=3, lora_name="ad")
    h = list(a.block_hashes)
    scheduler.add_request(a)
    seen = run(scheduler, 3)
    assert seen[0] == seen[1] == []
    assert seen[2] == [
        BlockStored((h[0],), None, (10, 11, 12, 13), BLOCK, "ad", 0, medium="CPU"),
        BlockStored((h[1],), h[0], (14, 15, 16, 17), BLOCK, "ad", 0, medium="CPU"),
        BlockStored((h[2],), h[1], (18, 19, 20, 21), BLOCK, "ad", 0, medium="CPU"),
    ]


def test_a_block_flushed_at_finish_carries_the_output_tokens_it_holds() -> None:
    """Four sampled tokens fill the fourth block (22 and three 7s) as the request finishes:
    the finish-time flush stores it with those tokens, parented on the third block."""
    scheduler = events_scheduler()
    a = make_request("a", range(10, 23), BLOCK, max_tokens=4)
    scheduler.add_request(a)
    stored = [e for step in run(scheduler, 7) for e in step]
    assert isinstance(stored[-1], BlockStored)
    assert (stored[-1].block_hashes, stored[-1].parent_block_hash, stored[-1].token_ids) == (
        (a.block_hashes[3],), a.block_hashes[2], (22, 7, 7, 7))
    assert [e.block_hashes[0] for e in stored if isinstance(e, BlockStored)] == \
        a.block_hashes[:4]


def test_an_evicted_cpu_copy_is_announced_removed_on_the_cpu() -> None:
    """A CPU pool of 5 (4 usable): b's store of three blocks takes the empty one and two of
    a's cached copies, LRU first; the removals are announced in the step that chooses the
    store, b's copies a step later."""
    scheduler = events_scheduler(num_cpu_blocks=5)
    a = make_request("a", range(10, 23), BLOCK, max_tokens=3)
    scheduler.add_request(a)
    run(scheduler, 5)
    b = make_request("b", range(100, 113), BLOCK, max_tokens=3)
    scheduler.add_request(b)
    seen = run(scheduler, 3)
    assert seen[1] == [BlockRemoved((a.block_hashes[0],), 0, medium="CPU"),
                       BlockRemoved((a.block_hashes[1],), 0, medium="CPU")]
    assert [e.block_hashes for e in seen[2]] == [(h,) for h in b.block_hashes[:3]]


def test_lazy_copies_are_announced_without_payload() -> None:
    """Lazy mode copies blocks from the GPU free queue, with no request at hand: the keys
    alone, at the group's block size. A pool of 4 GPU blocks makes b's prompt push a's
    cached blocks to the front of the free queue."""
    scheduler = make_scheduler(8, block_size=BLOCK, max_num_batched_tokens=64,
                               enable_kv_cache_events=True,
                               kv_connector=OffloadSettings(32, True, "fail"))
    a = make_request("a", range(10, 23), BLOCK, max_tokens=1)
    scheduler.add_request(a)
    stored = [e for step in run(scheduler, 4) for e in step]
    assert stored
    assert all(e == BlockStored(e.block_hashes, None, (), BLOCK, None, 0, medium="CPU")
               for e in stored)
    assert {e.block_hashes[0] for e in stored if isinstance(e, BlockStored)} <= set(
        a.block_hashes)


def test_with_events_off_the_tier_announces_nothing() -> None:
    scheduler = events_scheduler(num_cpu_blocks=4, events=False)
    for name, first in (("a", 10), ("b", 100)):
        scheduler.add_request(make_request(name, range(first, first + 13), BLOCK, max_tokens=3))
        assert run(scheduler, 5) == [[]] * 5
    assert scheduler.connector.cpu_block_pool.kv_event_queue == []  # type: ignore[union-attr]


def test_sub_block_keys_carry_their_own_payloads() -> None:
    """Blocks of 8 hashed every 4: the block at index 1 (tokens 8..15) is keyed by the hash
    at 16 and carries the one at 12. Its primary payload is the whole block parented on the
    previous block's key; the sub-block key's is its 4 tokens parented on the hash before
    it, announced at the hash block size."""
    request = make_request("a", range(10, 30), 4, max_tokens=1, lora_name="ad")
    fine = request.block_hashes  # keys at 4, 8, 12, 16, 20
    coarse = [fine[1], fine[3]]  # keys at 8 and 16 (the block size)
    metas = capture_block_meta(request, 1, fine[3], coarse, 8, 4)
    assert metas == {
        fine[3]: StoredBlockMeta(tuple(range(18, 26)), fine[1], "ad"),
        fine[2]: StoredBlockMeta((18, 19, 20, 21), fine[1], "ad", 4),
    }
    source = KVCacheBlock(5)
    source.block_hash, source.hash_group_id, source.extra_hashes = fine[3], 0, [fine[2]]
    assert stored_events(source, metas, [8], "CPU") == [
        BlockStored((fine[3],), fine[1], tuple(range(18, 26)), 8, "ad", 0, medium="CPU"),
        BlockStored((fine[2],), fine[1], (18, 19, 20, 21), 4, "ad", 0, medium="CPU")]
    # No payload captured (a lazy copy, a hand-off): keys only, sub-block keys at size 0.
    assert stored_events(source, {}, [8], "CPU") == [
        BlockStored((fine[3],), None, (), 8, None, 0, medium="CPU"),
        BlockStored((fine[2],), None, (), 0, None, 0, medium="CPU")]


def test_the_first_blocks_sub_block_key_has_no_parent() -> None:
    """Block 0 (tokens 0..7, keyed by the hash at 8) carries the key at 4: the first hash
    block of the prompt, parented on nothing."""
    request = make_request("a", range(10, 30), 4)
    fine = request.block_hashes
    assert capture_block_meta(request, 0, fine[1], [fine[1], fine[3]], 8, 4) == {
        fine[1]: StoredBlockMeta(tuple(range(10, 18)), None, None),
        fine[0]: StoredBlockMeta((10, 11, 12, 13), None, None, 4),
    }


def test_a_payload_of_another_size_is_sent_empty_but_keeps_its_lora() -> None:
    request = make_request("a", range(10, 30), 4, lora_name="ad")
    source = KVCacheBlock(5)
    source.block_hash, source.hash_group_id = request.block_hashes[0], 1
    meta = {source.block_hash: StoredBlockMeta((1, 2, 3, 4), None, "ad")}
    assert stored_events(source, meta, [4, 8], "CPU") == [
        BlockStored((source.block_hash,), None, (), 8, "ad", 1, medium="CPU")]


def test_the_pools_evictions_are_relabelled_and_stored_events_kept() -> None:
    key = make_request("a", range(4), 4).block_hashes[0]
    stored = BlockStored((key,), None, (), 4, None, 0, medium="CPU")
    assert on_tier([BlockRemoved((key,), 2), stored], "CPU") == [
        BlockRemoved((key,), 2, medium="CPU"), stored]
    assert on_tier([BlockRemoved((key,), 2)], "STORAGE") == [
        BlockRemoved((key,), 2, medium="STORAGE")]


def test_a_block_past_the_requests_hashes_stops_on_upstreams_release_check() -> None:
    """A block confirmed past the request's hashes (drafts counted as computed at a finish on
    max_tokens) cannot have its sub-block payloads captured: 0.32 crashes there, and so does
    the twin, on the named check (`conformance/upstream_bugs/cpu-event-hashes-past-request`)."""
    request = make_request("a", range(10, 22), 4)  # three hash blocks of 4
    blocks_of_8 = hashes_at_block_size(request.block_hashes, 4, 8)
    with pytest.raises(ReleaseCheckFailed, match="'cpu-event-hashes-past-request'.*block 1 "
                                                 "ends at token 16, past its 3 hash blocks"):
        capture_block_meta(request, 1, request.block_hashes[2], blocks_of_8, 8, 4)
