"""Self-describing KV events of the OffloadingConnector (`self_describing_kv_events`,
`impl.connector.offloading.events.ConnectorEvents`): each chunk announced with its per-block
hashes, tokens, parent and LoRA, its removal fanned out to the same hashes, payloads kept
from the store (or a readable hit) to the batch that announces the removal.

Layout: full attention, blocks of 4 tokens, chunks of 2 blocks (8 tokens)."""

from __future__ import annotations

from impl.connector.offloading.events import ChunkPayload, ConnectorEvents
from impl.connector.offloading.keys import OffloadEvent, offload_key
from impl.connector.offloading.request_state import GroupShape
from impl.connector.types import OffloadingSettings
from impl.core.events import BlockRemoved, BlockStored, KVCacheEvent
from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.test_offloading_connector import BLOCK, run_step

FULL = GroupShape(0, 4, 8, 2, FullAttentionSpec(4))
WINDOW = GroupShape(1, 4, 8, 2, SlidingWindowSpec(4, sliding_window=8), window=1)


def described_scheduler(num_cpu_chunks: int = 4) -> Scheduler:
    return make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                          enable_kv_cache_events=True,
                          kv_connector=OffloadingSettings(num_cpu_chunks, 2,
                                                          self_describing_kv_events=True))


def cpu_events(scheduler: Scheduler) -> list[KVCacheEvent]:
    return [e for e in scheduler.take_events()
            if isinstance(e, BlockStored | BlockRemoved) and e.medium == "CPU"]


def store(scheduler: Scheduler, name: str, first: int) -> list[KVCacheEvent]:
    """A 17-token prompt (two whole chunks) runs; its store is reported a step later; the
    tier's events of that report."""
    scheduler.add_request(make_request(name, range(first, first + 17), BLOCK, max_tokens=2,
                                       lora_name="ad"))
    _, meta = run_step(scheduler)
    cpu_events(scheduler)
    run_step(scheduler, done=tuple(meta.store_jobs))
    return cpu_events(scheduler)


def test_a_stored_chunk_carries_its_block_hashes_tokens_parent_and_lora() -> None:
    scheduler = described_scheduler()
    events = store(scheduler, "a", 10)
    h = make_request("x", range(10, 27), BLOCK, lora_name="ad").block_hashes
    # (The two chunks come in the order of the job's key set, as upstream's do.)
    assert sorted(events, key=lambda e: e.block_hashes) == sorted([
        BlockStored((h[0], h[1]), None, tuple(range(10, 18)), BLOCK, "ad", 0, medium="CPU"),
        BlockStored((h[2], h[3]), h[1], tuple(range(18, 26)), BLOCK, "ad", 0, medium="CPU"),
    ], key=lambda e: e.block_hashes)


def test_an_evicted_chunk_is_removed_by_every_block_hash_and_its_payload_dropped() -> None:
    """A tier of two chunks: b's two chunks evict a's, one removal event naming a's four
    block hashes; a's payloads go with it, b's stay."""
    scheduler = described_scheduler(num_cpu_chunks=2)
    store(scheduler, "a", 10)
    a = make_request("x", range(10, 27), BLOCK, lora_name="ad").block_hashes
    scheduler.add_request(make_request("b", range(100, 117), BLOCK, max_tokens=2))
    _, meta = run_step(scheduler)
    removed = [e for e in cpu_events(scheduler) if isinstance(e, BlockRemoved)]
    assert len(removed) == 1 and removed[0].group_id == 0
    assert sorted(removed[0].block_hashes) == sorted(a[:4])
    tracked = scheduler.connector.events.payloads  # type: ignore[union-attr]
    b = make_request("y", range(100, 117), BLOCK).block_hashes
    assert set(tracked) == {offload_key(b[1], 0), offload_key(b[3], 0)}


def test_a_payload_removed_and_stored_again_in_one_batch_is_dropped_after_it() -> None:
    """The removal is announced with the payload, the store after it too; at the batch's
    end nothing has put the chunk back (only a store offer or a readable hit does), so its
    payload goes, and a later removal is announced by the key alone."""
    events = ConnectorEvents(True)
    request = make_request("a", range(10, 27), BLOCK)
    key = offload_key(request.block_hashes[1], 0)
    events.record_store(request, FULL, 0, key)
    out = events.kv_events([OffloadEvent((key,), True), OffloadEvent((key,), False)])
    pair = (request.block_hashes[0], request.block_hashes[1])
    assert [e.block_hashes for e in out] == [pair, pair]
    assert events.payloads == {}
    assert events.kv_events([OffloadEvent((key,), True)]) == [
        BlockRemoved((request.block_hashes[1],), 0, medium="CPU")]


def test_a_readable_hit_snapshots_a_payload_only_when_none_is_kept() -> None:
    events = ConnectorEvents(True)
    request = make_request("a", range(10, 27), BLOCK)
    key = offload_key(request.block_hashes[3], 0)
    events.record_lookup(request, FULL, 1, key)
    first = events.payloads[key]
    assert first == ChunkPayload((request.block_hashes[2], request.block_hashes[3]),
                                 request.block_hashes[1], tuple(range(18, 26)), 4, None, 0)
    events.record_lookup(make_request("b", range(10, 27), BLOCK, lora_name="z"), FULL, 1, key)
    assert events.payloads[key] is first
    events.record_store(make_request("b", range(10, 27), BLOCK, lora_name="z"), FULL, 1, key)
    assert events.payloads[key].lora_name == "z"  # a store offer snapshots anew


def test_windowed_groups_and_the_option_off_keep_the_plain_payload() -> None:
    request = make_request("a", range(10, 27), BLOCK)
    key = offload_key(request.block_hashes[1], 1)
    on, off = ConnectorEvents(True), ConnectorEvents(False)
    on.record_store(request, WINDOW, 0, key)
    off.record_store(request, FULL, 0, offload_key(request.block_hashes[1], 0))
    assert on.payloads == off.payloads == {}
    assert on.kv_events([OffloadEvent((key,), False)]) == [
        BlockStored((request.block_hashes[1],), None, (), 0, None, 1, medium="CPU")]


def test_a_partial_tail_is_described_from_its_blocks_start_to_the_boundary() -> None:
    """Blocks (and chunks) of 8 hashed every 2: a tail at 14 lies in the block from 8; its
    payload is the hash blocks at 10, 12 and 14, their six tokens, at the hash block size,
    parented on the hash at 8."""
    shape = GroupShape(0, 8, 8, 4, FullAttentionSpec(8))
    request = make_request("a", range(10, 30), 2, lora_name="ad")
    fine = request.block_hashes  # one hash per two tokens
    events = ConnectorEvents(True)
    key = offload_key(fine[6], 0)
    events.record_partial(request, shape, 14, key, lookup=False)
    assert events.payloads[key] == ChunkPayload((fine[4], fine[5], fine[6]), fine[3],
                                                tuple(range(18, 24)), 2, "ad", 0)
    events.record_partial(make_request("b", range(10, 30), 2), shape, 14, key, lookup=True)
    assert events.payloads[key].lora_name == "ad"  # a hit keeps the payload it finds
    events.record_partial(make_request("b", range(10, 30), 2), shape, 14, key, lookup=False)
    assert events.payloads[key].lora_name is None  # a store snapshots anew
    events.reset()
    assert events.payloads == {}
    events.record_partial(request, shape, 14, key, lookup=True)  # a hit with none kept
    assert events.payloads[key].token_ids == tuple(range(18, 24))


def test_a_partial_tail_in_the_first_block_has_no_parent() -> None:
    shape = GroupShape(0, 8, 8, 4, FullAttentionSpec(8))
    request = make_request("a", range(10, 30), 2)
    events = ConnectorEvents(True)
    key = offload_key(request.block_hashes[2], 0)
    events.record_partial(request, shape, 6, key, lookup=False)
    assert events.payloads[key] == ChunkPayload(tuple(request.block_hashes[:3]), None,
                                                (10, 11, 12, 13, 14, 15), 2, None, 0)


def test_hashed_every_token_a_tail_starts_at_its_own_block() -> None:
    """Blocks of 8 hashed every token: a tail at 9 or at 15 lies in the block from 8 (not
    the one before it, nor the next)."""
    shape = GroupShape(0, 8, 8, 8, FullAttentionSpec(8))
    request = make_request("a", range(10, 30), 1)
    fine = request.block_hashes
    events = ConnectorEvents(True)
    for boundary in (9, 15):
        key = offload_key(fine[boundary - 1], 0)
        events.record_partial(request, shape, boundary, key, lookup=False)
        payload = events.payloads[key]
        assert (payload.block_hashes, payload.parent_block_hash, payload.token_ids) == (
            tuple(fine[8:boundary]), fine[7], tuple(range(18, 10 + boundary)))
