"""The offloading manager's policies and integrity checks in the corners the lockstep machine
reaches rarely: ARC's ghost arithmetic and its T2 paths, 0.33's LRU request ranks on reused
chunks, and every corruption `check_integrity()` must name."""

from __future__ import annotations

import pytest

from impl.behaviour import BEHAVIOUR_0_33
from impl.connector.offloading.arc import ARCPolicy
from impl.connector.offloading.chunks import Chunk
from impl.connector.offloading.keys import OffloadKey, RequestContext, offload_key
from impl.connector.offloading.lru import LRUPolicy
from impl.connector.offloading.manager import CPUOffloadingManager
from vtwin.errors import IntegrityError


def k(n: int) -> OffloadKey:
    return offload_key(bytes([n]) * 8, 0)


def ghosts(policy: ARCPolicy, recent: list[int], frequent: list[int]) -> None:
    for n in recent:
        policy.recent_ghosts[k(n)] = None
    for n in frequent:
        policy.frequent_ghosts[k(n)] = None


def test_a_recent_ghost_raises_the_target_by_the_ghost_lists_ratio() -> None:
    policy = ARCPolicy(capacity=10)
    ghosts(policy, [1, 2], [3, 4, 5, 6, 7])
    policy.on_store_miss([k(1)])
    assert policy.target_recent == 2.5                       # max(1, 5 / 2)
    assert list(policy.recent_ghosts) == [k(2), k(1)]        # the hit ghost moves up
    policy.on_store_miss([k(3)])
    assert policy.target_recent == 1.5                       # max(1, 2 / 5) = 1 down
    assert list(policy.frequent_ghosts) == [k(4), k(5), k(6), k(7), k(3)]
    policy.on_store_miss([k(9)])                             # no ghost: nothing learnt
    assert policy.target_recent == 1.5


def test_the_target_stays_between_zero_and_the_capacity() -> None:
    policy = ARCPolicy(capacity=3)
    ghosts(policy, [1], [2, 3, 4, 5, 6, 7, 8])
    policy.on_store_miss([k(1)])
    assert policy.target_recent == 3                         # 0 + 7, capped at 3
    policy = ARCPolicy(capacity=3)
    policy.target_recent = 0.5
    ghosts(policy, [1, 2, 3, 4], [5])
    policy.on_store_miss([k(5)])
    assert policy.target_recent == 0                         # 0.5 - 4, floored at 0


def test_a_touch_learns_from_a_ghost_and_misses_learn_tail_first() -> None:
    policy = ARCPolicy(capacity=10)
    ghosts(policy, [1, 2], [])
    policy.touch([k(1)])
    assert policy.target_recent == 1 and list(policy.recent_ghosts) == [k(2), k(1)]
    policy.on_store_miss([k(1), k(2)])                       # the tail first: k(2), then k(1)
    assert list(policy.recent_ghosts) == [k(2), k(1)] and policy.target_recent == 3


def test_a_frequent_ghost_stored_again_leaves_the_ghost_list() -> None:
    policy = ARCPolicy(capacity=4)
    ghosts(policy, [1], [2])
    policy.insert(k(2), Chunk(0), RequestContext("a"))
    policy.insert(k(1), Chunk(1), RequestContext("a"))
    assert not policy.recent_ghosts and not policy.frequent_ghosts
    policy.check_integrity()


def test_a_reused_chunk_already_frequent_moves_to_t2s_recent_end() -> None:
    manager = CPUOffloadingManager(4, "arc")
    writer = RequestContext("w")
    for n in (1, 2, 3):
        plan = manager.prepare_store([k(n)], writer)
        assert plan is not None
        manager.complete_store([k(n)])
    for name in ("r1", "r2"):
        reader = RequestContext(name)
        manager.prepare_load([k(1), k(2)], reader)
        manager.complete_load([k(1), k(2)])
        manager.on_request_finished(reader)
    policy = manager.policy
    assert isinstance(policy, ARCPolicy) and list(policy.frequent) == [k(2), k(1)]
    reader = RequestContext("r3")
    manager.prepare_load([k(2)], reader)
    manager.complete_load([k(2)])
    manager.on_request_finished(reader)
    assert list(policy.frequent) == [k(1), k(2)]


def test_a_failed_store_of_a_chunk_its_request_had_reused_leaves_t2() -> None:
    """`r` reads k(1) (reused), k(1) is evicted, `r` stores it again and finishes before the
    store completes: the pending chunk moved to T2 with the reuse; the store then fails."""
    manager = CPUOffloadingManager(1, "arc")
    writer, reader = RequestContext("w"), RequestContext("r")
    assert manager.prepare_store([k(1)], writer) is not None
    manager.complete_store([k(1)])
    manager.prepare_load([k(1)], reader)
    manager.complete_load([k(1)])
    plan = manager.prepare_store([k(2)], writer)
    assert plan is not None and plan.evicted == (k(1),)
    manager.complete_store([k(2)])
    plan = manager.prepare_store([k(1)], reader)
    assert plan is not None and plan.evicted == (k(2),)
    manager.on_request_finished(reader)
    policy = manager.policy
    assert isinstance(policy, ARCPolicy) and list(policy.frequent) == [k(1)]
    manager.complete_store([k(1)], success=False)
    assert not policy.frequent and not policy.recent
    manager.check_integrity()


def test_lru_0_33_a_reused_chunk_takes_its_readers_rank_tails_first() -> None:
    """`b` stores k(1)..k(3) with fresh ranks 1..3. `a` (positions known) offers k(9) (no
    position: skipped), k(1) at 16 and k(2) at 32: they rank (4, -16) and (4, -32), above
    k(3); the tail k(2) below the head k(1). 0.32 leaves the ranks alone."""
    manager = CPUOffloadingManager(4, "lru", behaviour=BEHAVIOUR_0_33)
    a, b = RequestContext("a"), RequestContext("b")
    plan = manager.prepare_store([k(1), k(2), k(3)], b)
    assert plan is not None
    manager.complete_store(list(plan.keys))
    a.set_position(k(1), 16)
    a.set_position(k(2), 32)
    manager.prepare_store([k(9), k(1), k(2)], a)             # k(9) is stored (pending)
    manager.check_integrity()
    plan = manager.prepare_store([k(5), k(6), k(7)], b)
    assert plan is not None and plan.evicted == (k(3), k(2), k(1))


def test_lru_0_33_a_second_reset_still_draws_a_new_request_rank() -> None:
    policy = LRUPolicy(request_ranks=True)
    ctx = RequestContext("a")
    ctx.set_position(k(1), 16)
    policy.insert(k(1), Chunk(0), ctx)
    assert policy.ranks[k(1)] == (1, -16)
    for fresh in (1, 2):                                     # ranks start over each time
        policy.clear()
        for n in range(fresh):
            policy.insert(k(10 + n), Chunk(n), RequestContext("b"))
        policy.insert(k(1), Chunk(9), ctx)
        assert policy.ranks[k(1)] == (fresh + 1, -16)


def corrupt_arc() -> ARCPolicy:
    policy = ARCPolicy(capacity=2)
    policy.insert(k(1), Chunk(0), RequestContext("a"))
    policy.check_integrity()
    return policy


@pytest.mark.parametrize(("corrupt", "message"), [
    (lambda p: p.frequent.__setitem__(k(1), Chunk(0)), "arc: a chunk is in T1 and T2"),
    (lambda p: p.recent_ghosts.__setitem__(k(1), None), "arc: a cached chunk is also a ghost"),
    (lambda p: p.frequent_ghosts.__setitem__(k(1), None), "arc: a cached chunk is also a ghost"),
    (lambda p: [p.recent_ghosts.__setitem__(k(n), None) for n in (5, 6, 7)],
     "arc: a ghost list is longer than the cache"),
    (lambda p: [p.frequent_ghosts.__setitem__(k(n), None) for n in (5, 6, 7)],
     "arc: a ghost list is longer than the cache"),
    (lambda p: setattr(p, "target_recent", 2.5), r"arc: target outside \[0, capacity\]"),
    (lambda p: setattr(p, "target_recent", -0.5), r"arc: target outside \[0, capacity\]"),
])
def test_arc_integrity_names_each_corruption(corrupt: object, message: str) -> None:
    policy = corrupt_arc()
    corrupt(policy)  # type: ignore[operator]
    with pytest.raises(IntegrityError, match=f"^{message}"):
        policy.check_integrity()


def test_arc_integrity_accepts_full_ghost_lists_and_the_target_at_its_bounds() -> None:
    policy = corrupt_arc()
    ghosts(policy, [5, 6], [7, 8])
    for target in (0.0, 2.0):
        policy.target_recent = target
        policy.check_integrity()


def lru_with_idle_chunk() -> LRUPolicy:
    policy = LRUPolicy(request_ranks=False)
    chunk = Chunk(0)
    policy.insert(k(1), chunk, RequestContext("a"))
    chunk.ref_cnt = 0
    policy.mark_evictable(k(1))
    policy.check_integrity()
    return policy


@pytest.mark.parametrize(("corrupt", "message"), [
    (lambda p: p.ranks.pop(k(1)), "lru: ranked keys differ from the cached ones"),
    (lambda p: p.ranks.__setitem__(k(2), (9, 0)), "lru: ranked keys differ from the cached ones"),
    (lambda p: p.evictable.discard(k(1)), "lru: the evictable set is not the idle chunks"),
    (lambda p: setattr(p.chunks[k(1)], "ref_cnt", 1),
     "lru: the evictable set is not the idle chunks"),
    (lambda p: p._heap.clear(), "lru: an evictable chunk is missing from the heap"),
    (lambda p: p.ranks.__setitem__(k(1), (9, 0)),
     "lru: an evictable chunk is missing from the heap"),
])
def test_lru_integrity_names_each_corruption(corrupt: object, message: str) -> None:
    policy = lru_with_idle_chunk()
    corrupt(policy)  # type: ignore[operator]
    with pytest.raises(IntegrityError, match=f"^{message}"):
        policy.check_integrity()


@pytest.mark.parametrize(("corrupt", "message"), [
    (lambda m: m.slots.given_back.append(0), "offloading: a free slot holds a chunk"),
    (lambda m: setattr(m.policy.get(k(2)), "chunk_id", 0),
     "offloading: two chunks share a CPU slot"),
    (lambda m: setattr(m.slots, "handed_out", 3),
     "offloading: handed-out slots are neither held nor free"),
    (lambda m: setattr(m, "num_writing", 0), "offloading: 0 writes counted"),
    (lambda m: setattr(m, "num_idle", 2), "offloading: 2 idle counted"),
])
def test_manager_integrity_names_each_corruption(corrupt: object, message: str) -> None:
    manager = CPUOffloadingManager(4, "lru")
    ctx = RequestContext("a")
    plan = manager.prepare_store([k(1)], ctx)
    assert plan is not None
    manager.complete_store([k(1)])
    manager.prepare_store([k(2)], ctx)                       # one idle, one being written
    manager.check_integrity()
    corrupt(manager)  # type: ignore[operator]
    with pytest.raises(IntegrityError, match=f"^{message}"):
        manager.check_integrity()


def stored_chunks(manager: CPUOffloadingManager, context: RequestContext, *numbers: int) -> None:
    plan = manager.prepare_store([k(n) for n in numbers], context)
    assert plan is not None
    manager.complete_store(list(plan.keys))


def test_defaults_are_lru_without_events() -> None:
    manager = CPUOffloadingManager(2)
    stored_chunks(manager, RequestContext("a"), 1)
    assert isinstance(manager.policy, LRUPolicy) and manager.take_events() == []
    assert manager.tracker is None


def test_a_request_records_each_chunk_once_per_group_in_first_seen_order() -> None:
    manager = CPUOffloadingManager(4)
    ctx = RequestContext("a")
    g1 = offload_key(bytes([1]) * 8, 1)
    stored_chunks(manager, RequestContext("w"), 1, 2)
    manager.prepare_load([k(1)], ctx)
    manager.prepare_load([k(1), k(2)], ctx)                  # k(1) again, then a new one
    assert ctx.access is not None and ctx.access.seen == {k(1), k(2)}
    manager.prepare_store([g1, k(2)], ctx)
    assert ctx.access.groups == {0: [k(1), k(2)], 1: [g1]}
    assert ctx.access.seen == {k(1), k(2), g1} and ctx.access.reused == {k(1), k(2)}


def test_finishing_is_ignored_twice_after_a_reset_and_for_an_unseen_request() -> None:
    manager = CPUOffloadingManager(4)
    policy = manager.policy
    assert isinstance(policy, LRUPolicy)
    reader = RequestContext("r")
    stored_chunks(manager, RequestContext("w"), 1, 2)
    manager.prepare_load([k(1)], reader)
    manager.complete_load([k(1)])
    manager.on_request_finished(reader)
    ranks = dict(policy.ranks)
    manager.on_request_finished(reader)                      # a second finish: nothing
    assert policy.ranks == ranks
    manager.on_request_finished(RequestContext("unseen"))    # never seen: nothing
    for _ in range(2):                # a record from before a reset is stale, every time
        old = RequestContext("old")
        manager.prepare_load([k(2)], old)
        manager.reset_cache()
        stored_chunks(manager, RequestContext("w2"), 2, 3)
        ranks = dict(policy.ranks)
        manager.on_request_finished(old)
        assert policy.ranks == ranks


@pytest.mark.parametrize("pending", [True, False])
def test_loads_only_read_readable_chunks_and_complete_only_held_ones(pending: bool) -> None:
    manager = CPUOffloadingManager(2)
    ctx = RequestContext("a")
    if pending:
        manager.prepare_store([k(1)], ctx)
        with pytest.raises(IntegrityError, match=r"^offloading: load of a chunk that is not"):
            manager.prepare_load([k(1)], ctx)
    else:
        stored_chunks(manager, ctx, 1)
        with pytest.raises(IntegrityError, match=r"^offloading: completed load of a chunk no"):
            manager.complete_load([k(1)])


def test_two_loads_pin_a_chunk_until_both_complete() -> None:
    manager = CPUOffloadingManager(1)
    ctx = RequestContext("a")
    stored_chunks(manager, ctx, 1)
    manager.prepare_load([k(1)], ctx)
    manager.prepare_load([k(1)], RequestContext("b"))
    manager.complete_load([k(1)])
    assert manager.prepare_store([k(2)], ctx) is None        # still read by one load
    manager.complete_load([k(1)])
    plan = manager.prepare_store([k(2)], ctx)
    assert plan is not None and plan.evicted == (k(1),)


def test_an_offer_of_a_stored_chunk_counts_as_a_reuse_for_arc() -> None:
    manager = CPUOffloadingManager(3, "arc")
    stored_chunks(manager, RequestContext("w"), 1, 2)
    ctx = RequestContext("a")
    plan = manager.prepare_store([k(1), k(3)], ctx)
    assert plan is not None and plan.keys == (k(3),)
    assert ctx.access is not None and ctx.access.reused == {k(1)}
    manager.on_request_finished(ctx)
    policy = manager.policy
    assert isinstance(policy, ARCPolicy) and list(policy.frequent) == [k(1)]


def test_completing_a_store_skips_ready_and_unknown_chunks() -> None:
    manager = CPUOffloadingManager(3, enable_events=True)
    ctx = RequestContext("a")
    stored_chunks(manager, ctx, 1)
    manager.prepare_store([k(2)], ctx)
    manager.take_events()
    manager.complete_store([k(1), k(9), k(2)])               # k(1) done already, k(9) unknown
    assert manager.num_writing == 0 and manager.num_idle == 2
    assert [event.keys for event in manager.take_events()] == [(k(2),)]
    manager.check_integrity()


def test_stats_of_a_tier_of_one_slot_and_of_none() -> None:
    manager = CPUOffloadingManager(1)
    manager.prepare_store([k(1)], RequestContext("a"))
    stats = manager.get_stats()
    assert (stats.usage, stats.write_usage, stats.read_usage) == (1.0, 1.0, 0.0)
    empty = CPUOffloadingManager(0).get_stats()
    assert (empty.usage, empty.write_usage, empty.read_usage) == (0.0, 0.0, 0.0)


def test_a_finished_request_ranks_its_chunks_by_token_position_not_by_key() -> None:
    manager = CPUOffloadingManager(3)
    stored_chunks(manager, RequestContext("w"), 1, 2, 3)
    reader = RequestContext("r")
    reader.set_position(k(2), 16)                            # k(2) is the head
    reader.set_position(k(1), 32)
    manager.prepare_load([k(1), k(2)], reader)
    manager.complete_load([k(1), k(2)])
    manager.on_request_finished(reader)                      # ranked tail first: k(1), k(2)
    plan = manager.prepare_store([k(4), k(5), k(6)], RequestContext("w"))
    assert plan is not None and plan.evicted == (k(3), k(1), k(2))
