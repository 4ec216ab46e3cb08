"""An operator's reset of the CPU offload tier (`impl.connector.offload_reset`): transfers in
flight abandoned (their completions only drop pins), the CPU pool emptied once nothing is
abandoned, running requests' store state forgotten.

Layout: full attention, blocks of 4 tokens, a GPU pool of 16, a CPU pool of 32; prompts of 13
tokens (three full blocks), a sampled token of 7 per step (`run_step`)."""

from __future__ import annotations

import pytest

from impl.connector.cpu_offload import SimpleCPUOffloadScheduler
from impl.connector.types import KVConnectorOutput, OffloadSettings
from impl.core.events import AllBlocksCleared, BlockStored
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.offload_helpers import (
    BLOCK,
    evict_prefix_then_resend,
    offload_scheduler,
    run_step,
    stores_done,
)
from vtwin.errors import IntegrityError

EMPTY = (0, 0, 31)  # the CPU pool's (active, cached, empty) with nothing in it


def tier(scheduler: Scheduler) -> SimpleCPUOffloadScheduler:
    assert isinstance(scheduler.connector, SimpleCPUOffloadScheduler)
    return scheduler.connector


def stored_on_cpu(scheduler: Scheduler) -> None:
    """`a` runs; its three blocks are stored (chosen in step 1, done in step 2)."""
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    run_step(scheduler)
    run_step(scheduler)
    run_step(scheduler, stores_done(0))
    assert tier(scheduler).cpu_counts() == (0, 3, 28)


def test_with_nothing_in_flight_the_cpu_pool_is_emptied() -> None:
    scheduler = make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                               enable_kv_cache_events=True, kv_connector=OffloadSettings(32))
    stored_on_cpu(scheduler)
    scheduler.take_events()
    assert scheduler.reset_connector_cache()
    assert tier(scheduler).cpu_counts() == EMPTY
    run_step(scheduler)  # (events go out with the next update)
    assert scheduler.take_events() == [AllBlocksCleared()]


def test_a_store_in_flight_is_abandoned_and_its_copies_never_indexed() -> None:
    """The reset comes while a's store (event 0) is with the worker: refused; when the store
    completes its pins drop, nothing becomes findable, nothing is announced; a reset then
    succeeds."""
    scheduler = make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                               enable_kv_cache_events=True, kv_connector=OffloadSettings(32))
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    _, meta = run_step(scheduler)
    assert meta.store_event == 0
    assert not scheduler.reset_connector_cache()
    connector = tier(scheduler)
    assert connector.abandoned_stores.keys() == {0} and connector.has_pending_stores()
    assert connector.cpu_counts() == (3, 0, 28)
    scheduler.take_events()
    run_step(scheduler, stores_done(0))
    assert connector.cpu_counts() == (0, 0, 31)
    assert not [e for e in scheduler.take_events()
                if isinstance(e, BlockStored) and e.medium == "CPU"]
    assert not connector.abandoned_stores and connector.gpu_pins() == {}
    assert scheduler.reset_connector_cache()


def test_a_running_request_stores_nothing_after_a_reset() -> None:
    """a's prompt is stored; the reset forgets a's store state, so the block its decode
    tokens fill is never offered (without the reset it is, at the step after it fills)."""
    def stores(reset: bool) -> list[list[int]]:
        scheduler = offload_scheduler()
        scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=8))
        run_step(scheduler)
        run_step(scheduler)
        run_step(scheduler, stores_done(0))
        if reset:
            assert scheduler.reset_connector_cache()
        return [meta.store_gpu_blocks for _, meta in (run_step(scheduler) for _ in range(5))]

    assert [blocks for blocks in stores(reset=False) if blocks] == [[4]]
    assert [blocks for blocks in stores(reset=True) if blocks] == []


def test_a_load_in_flight_is_abandoned_and_still_delivered() -> None:
    """c loads a's prompt back from the CPU; the reset comes while the load is with the
    worker: refused. The load still lands (c runs from 12 computed tokens), its pins drop on
    completion, and a reset then empties the pool."""
    scheduler = offload_scheduler()
    evict_prefix_then_resend(scheduler)
    _, meta = run_step(scheduler)
    assert meta.load_event == 0
    assert not scheduler.reset_connector_cache()
    connector = tier(scheduler)
    assert connector.abandoned_loads.keys() == {"c"} and not connector.reqs_to_load
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset({"c"})))
    assert not connector.abandoned_loads and connector.cpu_counts()[0] == 0
    output, _ = run_step(scheduler)
    assert output.scheduled_new_reqs[0].num_computed_tokens == 12
    assert scheduler.requests["c"].status == RequestStatus.RUNNING
    assert scheduler.reset_connector_cache()
    assert connector.cpu_counts() == EMPTY


def test_an_aborted_request_with_an_abandoned_load_keeps_its_blocks_until_it_lands() -> None:
    scheduler = offload_scheduler()
    evict_prefix_then_resend(scheduler)
    run_step(scheduler)
    assert not scheduler.reset_connector_cache()
    scheduler.finish_requests("c", RequestStatus.FINISHED_ABORTED)
    assert tier(scheduler).loading_finished() == {"c"}
    scheduler.check_integrity()
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset({"c"})))
    assert "c" not in scheduler.requests and tier(scheduler).loading_finished() == set()


def test_a_pending_hit_and_a_queued_finished_store_are_released_at_once() -> None:
    """c's lookup pinned a's CPU blocks (a hit not yet allocated: asked and left for the next
    step's allocation), and d finished with its blocks queued for storing: the reset drops
    both pins at once and, nothing being abandoned, empties the pool."""
    scheduler = offload_scheduler()
    stored_on_cpu(scheduler)
    connector = tier(scheduler)
    c = make_request("c", range(10, 23), BLOCK)
    assert connector.get_num_new_matched_tokens(c, 0) == (12, True)
    assert connector.cpu_counts()[0] == 3
    d = make_request("d", range(200, 213), BLOCK)
    scheduler.add_request(d)
    run_step(scheduler)
    scheduler.finish_requests("d", RequestStatus.FINISHED_ABORTED)
    assert connector.pending_finished_stores
    assert scheduler.reset_connector_cache()
    assert not connector.pending_hits and not connector.pending_finished_stores
    assert connector.cpu_counts() == EMPTY and connector.gpu_pins() == {}


def test_lazy_mode_walks_from_the_head_again_after_a_reset() -> None:
    """A reset forgets where lazy mode's walk over the GPU free queue stopped: the next step
    walks from the head, and the tier copies the cached blocks about to be evicted again."""
    scheduler = offload_scheduler(lazy=True)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    for _ in range(3):
        run_step(scheduler)
    connector = tier(scheduler)
    assert connector.cursor is not None
    run_step(scheduler, stores_done(0))
    assert scheduler.reset_connector_cache()
    assert connector.cursor is None
    _, meta = run_step(scheduler)  # the copies were dropped: the walk copies them afresh
    assert meta.store_event == 1 and len(meta.store_gpu_blocks) == 3


def test_integrity_catches_a_load_both_kept_and_abandoned_or_missing_from_its_event() -> None:
    scheduler = offload_scheduler()
    evict_prefix_then_resend(scheduler)
    run_step(scheduler)  # c's load is sent (event 0)
    connector = tier(scheduler)
    connector.check_integrity()
    connector.abandoned_loads["c"] = connector.reqs_to_load["c"]
    with pytest.raises(IntegrityError, match=r"loads both kept and abandoned: \['c'\]"):
        connector.check_load_integrity()  # (the pools' own check would see the pins first)
    del connector.abandoned_loads["c"]
    events = connector.load_event_to_reqs
    events[0].remove("c")
    with pytest.raises(IntegrityError, match="load of c missing from event 0"):
        connector.check_integrity()
    del events[0]
    with pytest.raises(IntegrityError, match="load of c missing from event 0"):
        connector.check_integrity()


def test_integrity_catches_a_store_both_in_flight_and_abandoned() -> None:
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    run_step(scheduler)
    connector = tier(scheduler)
    connector.abandoned_stores[0] = connector.store_event_to_blocks[0]
    with pytest.raises(IntegrityError, match="both in flight and abandoned"):
        connector.check_load_integrity()
