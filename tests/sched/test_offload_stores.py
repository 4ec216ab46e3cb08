"""The CPU offload tier's store bookkeeping (`impl.connector.offload_stores`): how far ahead
of the allocator lazy mode copies, its cap at the CPU blocks free, and the integrity check
over store states and events (a leaked state, an event listing a request it no longer has)."""

from __future__ import annotations

import pytest

from impl.connector.cpu_offload import SimpleCPUOffloadScheduler
from impl.connector.offload_lazy import lazy_target_blocks
from impl.connector.types import OffloadSettings
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
from tests.sched.helpers import make_request
from tests.sched.offload_helpers import BLOCK, offload_scheduler, run_step, stores_done
from vtwin.errors import IntegrityError


def _config(*specs: FullAttentionSpec | SlidingWindowSpec) -> KVCacheConfig:
    return KVCacheConfig(64, tuple(KVCacheGroupSpec((f"layer{i}",), spec)
                                   for i, spec in enumerate(specs)))


def test_lazy_target_is_a_step_per_group_and_a_window_plus_one_block_doubled() -> None:
    window = SlidingWindowSpec(block_size=16, sliding_window=100)  # 7 blocks, + 1
    full = FullAttentionSpec(block_size=16)                        # 70 tokens: 5 blocks
    target = lazy_target_blocks(_config(window, full), max_num_batched_tokens=70)
    assert target == (8 + 5) * 2 and isinstance(target, int)
    assert lazy_target_blocks(_config(full), max_num_batched_tokens=64) == 8
    assert lazy_target_blocks(_config(SlidingWindowSpec(block_size=16, sliding_window=32)),
                              max_num_batched_tokens=999) == (2 + 1) * 2


def test_lazy_stores_stop_at_the_cpu_blocks_free() -> None:
    scheduler = offload_scheduler(lazy=True, num_cpu_blocks=3)  # the null block + 2 free
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    run_step(scheduler)  # `a` finishes: 3 cached blocks at the free queue's tail
    _, meta = run_step(scheduler)
    assert meta.store_event == 0 and meta.store_gpu_blocks == [3, 2]
    assert meta.store_cpu_blocks == [1, 2]
    _, meta = run_step(scheduler, stores_done(0))  # scheduled while both copies were pinned
    assert meta.store_event == -1
    _, meta = run_step(scheduler)
    # The cursor stopped before block 1; the CPU's two copies are now cached and evictable,
    # so block 1 goes next, over the oldest copy (block 3's).
    assert (meta.store_event, meta.store_gpu_blocks, meta.store_cpu_blocks) == (1, [1], [1])


def test_a_finished_request_forgets_its_store_state_once_its_stores_report() -> None:
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    run_step(scheduler)
    _, meta = run_step(scheduler)  # `a` finishes with its store event 0 in flight
    connector = scheduler.connector
    assert connector is not None and meta.store_event == 0
    state = connector.reqs_to_store["a"]
    assert state.finished and state.store_events == {0}
    assert connector.store_event_to_reqs == {0: ["a"]}
    run_step(scheduler, stores_done(0))
    assert connector.reqs_to_store == {} and connector.store_event_to_reqs == {}
    connector.reqs_to_store["a"] = state  # as if the cleanup had been skipped
    state.store_events.clear()
    with pytest.raises(IntegrityError, match="finished a keeps a store state"):
        scheduler.check_integrity()


def test_a_request_finished_without_stores_in_flight_is_forgotten_at_once() -> None:
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 13), BLOCK, max_tokens=1))  # < 1 block
    run_step(scheduler)
    connector = scheduler.connector
    assert connector is not None and "a" not in scheduler.requests
    assert connector.reqs_to_store == {}


@pytest.mark.parametrize("corrupt", ["unlisted", "forgotten", "ghost", "no-transfer",
                                     "unfinished"])
def test_integrity_catches_store_states_and_events_out_of_step(corrupt: str) -> None:
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    scheduler.add_request(make_request("b", range(50, 60), BLOCK, max_tokens=3))
    run_step(scheduler)
    run_step(scheduler)  # store event 0 in flight for `a` and `b`
    connector = scheduler.connector
    assert connector is not None
    assert connector.store_event_to_reqs == {0: ["a", "b"]}
    scheduler.check_integrity()
    if corrupt == "unlisted":
        connector.store_event_to_reqs[0].remove("b")
    elif corrupt == "forgotten":
        del connector.store_event_to_reqs[0]
    elif corrupt == "ghost":
        connector.reqs_to_store["a"].store_events.clear()
    elif corrupt == "no-transfer":
        connector.store_event_to_blocks[7] = connector.store_event_to_blocks.pop(0)
    else:
        connector.reqs_to_store["b"].finished = True
    with pytest.raises(IntegrityError, match="offload: "):
        connector.check_integrity()


def test_eager_stores_wait_while_every_cpu_block_is_pinned() -> None:
    scheduler = offload_scheduler(num_cpu_blocks=3)  # the null block + 2 free
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=6))
    connector = scheduler.connector
    assert connector is not None
    stored = []
    for report in (None, None, None, stores_done(0), None):
        _, meta = run_step(scheduler, report)
        stored.append((meta.store_event, meta.store_gpu_blocks, meta.store_cpu_blocks,
                       list(connector.reqs_to_store["a"].num_stored_blocks)))
    assert stored == [
        (-1, [], [], [0]),
        (0, [1, 2], [1, 2], [2]),  # 3 blocks confirmed, 2 CPU blocks free: the cursor stops
        (-1, [], [], [2]),         # both copies in flight: no CPU block free, none chosen
        (-1, [], [], [2]),         # the report lands after this step was scheduled
        (1, [3, 4], [1, 2], [4]),  # the copies are cached now, and evicted for blocks 3, 4
    ]


def test_hybrid_stores_stop_at_the_scheduler_block_size() -> None:
    """Hybrid hits are aligned to the scheduler block size (the groups' common multiple), so
    only confirmed tokens up to that alignment are worth a copy; one group stores them all."""
    def tier(*specs: FullAttentionSpec | SlidingWindowSpec) -> SimpleCPUOffloadScheduler:
        return SimpleCPUOffloadScheduler(OffloadSettings(16), _config(*specs),
                                         hash_block_size=BLOCK, max_num_batched_tokens=64)

    full = FullAttentionSpec(block_size=BLOCK)
    hybrid = tier(full, SlidingWindowSpec(block_size=2 * BLOCK, sliding_window=16))
    assert hybrid.cpu_coordinator.scheduler_block_size == 2 * BLOCK
    cacheable = hybrid.cpu_coordinator.get_num_cacheable_tokens
    assert [cacheable(n, group) for n in (7, 8, 13, 16) for group in (0, 1)] == [
        0, 0, 8, 8, 8, 8, 16, 16]
    single = tier(full).cpu_coordinator
    assert [single.get_num_cacheable_tokens(n, 0) for n in (7, 13)] == [7, 13]
    single.num_reprefillable_tokens = 2  # a chain of three MTP modules
    assert [single.get_num_cacheable_tokens(n, 0) for n in (1, 7, 13)] == [0, 5, 11]


def test_a_report_of_a_store_event_never_sent_is_ignored() -> None:
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    _, meta = run_step(scheduler)
    connector = scheduler.connector
    assert connector is not None and meta.store_event == 0
    run_step(scheduler, stores_done(5))  # stale or unknown: nothing changes
    assert list(connector.store_event_to_blocks) == [0]
    assert connector.reqs_to_store["a"].store_events == {0}
