"""The OffloadingConnector's CPU manager (`impl.connector.offloading`): exact slots, eviction
orders and events for LRU and ARC, the store threshold, and the 0.33 switches."""

from __future__ import annotations

import pytest

from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33
from impl.connector.offloading.arc import ARCPolicy
from impl.connector.offloading.keys import (
    LookupResult,
    OffloadEvent,
    OffloadKey,
    RequestContext,
    key_group,
    offload_key,
)
from impl.connector.offloading.manager import CPUOffloadingManager
from impl.connector.offloading.tracker import OfferTracker
from vtwin.errors import IntegrityError


def k(n: int, group: int = 0) -> OffloadKey:
    return offload_key(bytes([n]) * 8, group)


def stored(manager: CPUOffloadingManager, context: RequestContext,
           *numbers: int) -> tuple[int, ...]:
    """Store and complete keys `numbers`; their slots."""
    keys = [k(n) for n in numbers]
    plan = manager.prepare_store(keys, context)
    assert plan is not None
    manager.complete_store(list(plan.keys))
    manager.check_integrity()
    return plan.chunk_ids


def test_keys_carry_their_group() -> None:
    assert k(1, 3) == bytes([1]) * 8 + b"\x00\x00\x00\x03"
    assert key_group(k(1, 3)) == 3


def test_slots_fresh_first_then_the_last_given_back() -> None:
    manager = CPUOffloadingManager(4, "lru", enable_events=True)
    ctx = RequestContext("a")
    assert stored(manager, ctx, 1, 2, 3, 4) == (0, 1, 2, 3)
    plan = manager.prepare_store([k(5), k(6)], ctx)
    assert plan is not None
    assert plan.evicted == (k(1), k(2))          # least recent first
    assert plan.chunk_ids == (1, 0)              # given back 0 then 1: the last one first
    assert manager.take_events() == [OffloadEvent((k(1), k(2), k(3), k(4)), removed=False),
                                     OffloadEvent((k(1), k(2)), removed=True)]
    assert manager.lookup(k(5)) is LookupResult.HIT_PENDING
    manager.complete_store([k(5)], success=False)
    assert manager.lookup(k(5)) is LookupResult.MISS
    assert manager.take_events() == []           # 0.32: a failed store is silent
    manager.check_integrity()


def test_an_offer_never_evicts_its_own_keys_and_is_refused_whole() -> None:
    manager = CPUOffloadingManager(2, "lru")
    ctx = RequestContext("a")
    stored(manager, ctx, 1, 2)
    assert manager.prepare_store([k(1), k(2), k(3)], ctx) is None
    assert manager.lookup(k(3)) is LookupResult.MISS
    manager.prepare_load([k(1)], ctx)
    assert manager.prepare_store([k(3), k(4)], ctx) is None  # only k(2) is idle
    plan = manager.prepare_store([k(3)], ctx)
    assert plan is not None and plan.evicted == (k(2),)


def test_lru_a_touch_makes_the_head_most_recent() -> None:
    manager = CPUOffloadingManager(3, "lru")
    ctx = RequestContext("a")
    stored(manager, ctx, 1, 2, 3)
    manager.touch([k(1), k(2)])      # ranked tail first: k(1) ends most recent
    plan = manager.prepare_store([k(4), k(5)], ctx)
    assert plan is not None and plan.evicted == (k(3), k(2))


def test_lru_a_pinned_chunk_keeps_its_rank() -> None:
    manager = CPUOffloadingManager(3, "lru")
    ctx = RequestContext("a")
    stored(manager, ctx, 1, 2, 3)
    manager.prepare_load([k(1)], ctx)
    manager.touch([k(3)])
    manager.complete_load([k(1)])    # back among the idle with its old, oldest rank
    plan = manager.prepare_store([k(4)], ctx)
    assert plan is not None and plan.evicted == (k(1),)


def test_a_finished_request_may_not_see_new_chunks() -> None:
    manager = CPUOffloadingManager(4, "lru")
    ctx = RequestContext("r")
    stored(manager, ctx, 1)
    manager.on_request_finished(ctx)
    manager.on_request_finished(ctx)                      # a second finish is ignored
    with pytest.raises(IntegrityError, match="request r saw a chunk after it finished"):
        manager.prepare_store([k(5)], ctx)


def test_lru_request_finish_orders_by_position() -> None:
    manager = CPUOffloadingManager(4, "lru")
    writer, reader = RequestContext("w"), RequestContext("r")
    stored(manager, writer, 1, 2, 3, 4)
    reader.set_position(k(1), 16)
    reader.set_position(k(2), 32)
    manager.prepare_load([k(2), k(1)], reader)             # seen out of order
    manager.complete_load([k(2), k(1)])
    manager.on_request_finished(reader)                    # k(1) ranked last: most recent
    plan = manager.prepare_store([k(5), k(6), k(7)], writer)
    assert plan is not None and plan.evicted == (k(3), k(4), k(2))


def test_lru_0_33_ranks_a_running_requests_chunks_tails_first() -> None:
    for behaviour, evicted in ((BEHAVIOUR_0_32, (k(1),)), (BEHAVIOUR_0_33, (k(2),))):
        manager = CPUOffloadingManager(2, "lru", behaviour=behaviour)
        ctx = RequestContext("a")
        ctx.set_position(k(1), 16)
        ctx.set_position(k(2), 32)
        stored(manager, ctx, 1, 2)
        plan = manager.prepare_store([k(3)], RequestContext("b"))
        assert plan is not None and plan.evicted == evicted, behaviour.release


def test_0_33_announces_a_failed_store_as_a_metadata_only_removal() -> None:
    manager = CPUOffloadingManager(2, "arc", enable_events=True, behaviour=BEHAVIOUR_0_33)
    ctx = RequestContext("a")
    manager.prepare_store([k(1)], ctx)
    manager.complete_store([k(1)], success=False)
    assert manager.take_events() == [OffloadEvent((k(1),), removed=True, metadata_only=True)]


def test_arc_reuse_moves_to_frequent_and_t1_is_evicted_first() -> None:
    manager = CPUOffloadingManager(3, "arc")
    writer, reader = RequestContext("w"), RequestContext("r")
    stored(manager, writer, 1, 2, 3)
    manager.prepare_load([k(1)], reader)
    manager.complete_load([k(1)])
    manager.on_request_finished(reader)                    # k(1) reused: T1 -> T2
    plan = manager.prepare_store([k(4), k(5)], writer)
    assert plan is not None and plan.evicted == (k(2), k(3))


def test_arc_a_recent_ghost_raises_the_target_and_t2_gives_way() -> None:
    """Target 0: T1 (size >= 0) gives the victim. A store of an evicted T1 key (a B1 ghost)
    raises the target to 1; T1 then holds exactly its target, so the next victim is still
    T1's; with T1 below the target T2 gives way."""
    manager = CPUOffloadingManager(3, "arc")
    writer, reader = RequestContext("w"), RequestContext("r")
    stored(manager, writer, 1, 2, 3)
    manager.prepare_load([k(1), k(2)], reader)
    manager.complete_load([k(1), k(2)])
    manager.on_request_finished(reader)                    # T1 [3], T2 [2, 1]
    plan = manager.prepare_store([k(4)], writer)
    assert plan is not None and plan.evicted == (k(3),)    # T1 [4], B1 [3]
    manager.complete_store([k(4)])
    plan = manager.prepare_store([k(3)], RequestContext("x"))  # B1 ghost: target 1
    assert plan is not None and plan.evicted == (k(4),)    # |T1| 1 >= target 1
    manager.complete_store([k(3)])
    manager.prepare_load([k(3)], reader := RequestContext("y"))
    manager.complete_load([k(3)])
    manager.on_request_finished(reader)                    # T1 [], T2 [2, 1, 3]
    plan = manager.prepare_store([k(5)], writer)
    assert plan is not None and plan.evicted == (k(2),)    # |T1| 0 < target 1: T2
    manager.check_integrity()


def test_the_threshold_stores_a_key_on_its_second_offer() -> None:
    manager = CPUOffloadingManager(4, "lru", store_threshold=2, max_tracker_size=2)
    ctx = RequestContext("a")
    assert manager.prepare_store([k(1), k(2)], ctx) is not None
    assert manager.lookup(k(1)) is LookupResult.MISS
    manager.prepare_store([k(3)], ctx)                     # tracker full: forgets k(1)
    plan = manager.prepare_store([k(1), k(2)], ctx)
    assert plan is not None and plan.keys == (k(2),)
    stats = manager.get_stats()
    assert stats.stores_skipped == 4 and stats.allocation_sizes == (1,)
    assert stats.usage == stats.write_usage == 0.25 and stats.read_usage == 0.0


def test_reset_forgets_everything_and_requests_start_over() -> None:
    manager = CPUOffloadingManager(2, "arc")
    ctx = RequestContext("a")
    stored(manager, ctx, 1)
    manager.prepare_load([k(1)], ctx)
    manager.reset_cache()
    manager.check_integrity()
    assert manager.lookup(k(1)) is LookupResult.MISS
    assert stored(manager, ctx, 2) == (0,)


def test_integrity_names_a_miscounted_idle_chunk() -> None:
    manager = CPUOffloadingManager(2, "lru")
    stored(manager, RequestContext("a"), 1)
    manager.num_idle += 1
    with pytest.raises(IntegrityError, match="idle counted"):
        manager.check_integrity()


def test_an_unknown_policy_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="cache_policy: must be one of lru, arc"):
        CPUOffloadingManager(2, "fifo")


def test_arc_evicts_from_t1_when_t2_is_pinned_even_below_the_target() -> None:
    """Target 3 and |T1| 2: T2 goes first, but its chunks are being read, so T1 gives way
    (the third choice); a second victim in the same call then also comes from T1."""
    manager = CPUOffloadingManager(4, "arc")
    writer, reader = RequestContext("w"), RequestContext("r")
    stored(manager, writer, 1, 2)
    manager.prepare_load([k(1), k(2)], reader)
    manager.complete_load([k(1), k(2)])
    manager.on_request_finished(reader)                      # T2 [2, 1]
    stored(manager, writer, 3, 4)                            # T1 [3, 4]
    for victim, ghost in ((3, 5), (4, 3), (5, 4)):
        plan = manager.prepare_store([k(ghost)], RequestContext(f"g{ghost}"))
        assert plan is not None and plan.evicted == (k(victim),)
        manager.complete_store([k(ghost)])
    policy = manager.policy
    assert isinstance(policy, ARCPolicy) and policy.target_recent == 2.0
    assert list(policy.recent) == [k(3), k(4)] and list(policy.recent_ghosts) == [k(5)]
    manager.prepare_load([k(1), k(2)], RequestContext("pin"))  # T2 cannot give a victim
    plan = manager.prepare_store([k(5)], RequestContext("g5b"))  # B1 hit: target 3
    assert plan is not None and plan.evicted == (k(3),)
    manager.check_integrity()


def test_arc_a_batch_eviction_counts_down_what_t1_has_left() -> None:
    """Target 2, |T1| 3, three victims: T1 gives two (3 >= 2, then 2 >= 2); T1 then holds
    1 < 2, so the third is T2's."""
    manager = CPUOffloadingManager(4, "arc")
    writer, reader = RequestContext("w"), RequestContext("r")
    stored(manager, writer, 1)
    manager.prepare_load([k(1)], reader)
    manager.complete_load([k(1)])
    manager.on_request_finished(reader)                      # T2 [1]
    stored(manager, writer, 2, 3, 4)                         # T1 [2, 3, 4]
    for victim, ghost in ((2, 5), (3, 2), (4, 3)):           # targets 0, 1, 2
        plan = manager.prepare_store([k(ghost)], RequestContext(f"g{ghost}"))
        assert plan is not None and plan.evicted == (k(victim),)
        manager.complete_store([k(ghost)])
    policy = manager.policy
    assert isinstance(policy, ARCPolicy) and policy.target_recent == 2.0
    assert list(policy.recent) == [k(5), k(2), k(3)]
    plan = manager.prepare_store([k(7), k(8), k(9)], writer)
    assert plan is not None and plan.evicted == (k(5), k(2), k(1))


def test_the_offer_counter_forgets_the_oldest_but_never_a_key_of_the_same_offer() -> None:
    tracker = OfferTracker(threshold=2, max_size=3)
    tracker.record([k(1), k(2), k(3)])
    tracker.record([k(1), k(2), k(4), k(5)])  # room for one: k(3) goes; k(5) is not counted
    assert dict(tracker.counts) == {k(1): 2, k(2): 2, k(4): 1}
    assert tracker.admitted([k(1), k(4), k(5)]) == [k(1)]
    assert tracker.take_skipped() == 2 and tracker.take_skipped() == 0


def test_lru_0_33_draws_a_new_request_rank_after_each_reset() -> None:
    """Fresh ranks 1, 2 for `b`'s chunks, then `a`'s request rank 3: its chunk is the most
    recent. After a reset ranks start over, and `a` must draw a new request rank too."""
    manager = CPUOffloadingManager(3, "lru", behaviour=BEHAVIOUR_0_33)
    a, b = RequestContext("a"), RequestContext("b")
    for n in (3, 6):
        a.set_position(k(n), 16)
    stored(manager, b, 1, 2)
    stored(manager, a, 3)
    plan = manager.prepare_store([k(4)], b)
    assert plan is not None and plan.evicted == (k(1),)
    manager.reset_cache()
    stored(manager, b, 5)                                    # fresh rank 1
    stored(manager, a, 6)                                    # a's new request rank 2
    stored(manager, b, 7)                                    # fresh rank 3
    plan = manager.prepare_store([k(8)], b)
    assert plan is not None and plan.evicted == (k(5),)
    plan = manager.prepare_store([k(9)], b)
    assert plan is not None and plan.evicted == (k(6),)


def test_lru_a_long_touch_rebuilds_the_heap_and_keeps_the_order() -> None:
    manager = CPUOffloadingManager(100, "lru")
    ctx = RequestContext("a")
    stored(manager, ctx, *range(100))
    manager.touch([k(n) for n in range(80)])                 # >= 64 re-ranked: a rebuild
    manager.check_integrity()
    plan = manager.prepare_store([k(200), k(201)], ctx)
    assert plan is not None and plan.evicted == (k(80), k(81))


def test_lru_a_refused_eviction_puts_every_candidate_back() -> None:
    manager = CPUOffloadingManager(2, "lru")
    ctx = RequestContext("a")
    stored(manager, ctx, 1, 2)
    assert manager.prepare_store([k(1), k(3), k(4)], ctx) is None
    manager.check_integrity()
    plan = manager.prepare_store([k(3)], ctx)
    assert plan is not None and plan.evicted == (k(1),)
