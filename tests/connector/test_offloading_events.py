"""The OffloadingConnector's KV events (`impl.connector.offloading.events`): the manager's
chunk events as KV events with medium "CPU", and, inside the scheduler, exact events after
the step that stores a prompt and the one that evicts it, behind the GPU pool's."""

from __future__ import annotations

from impl.connector.offloading.events import ConnectorEvents
from impl.connector.offloading.keys import OffloadEvent, offload_key
from impl.connector.types import OffloadingSettings
from impl.core.events import BlockRemoved, BlockStored
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.test_offloading_connector import BLOCK, run_step


def h(n: int) -> bytes:
    return bytes([n]) * 8


def kv_events(events: list[OffloadEvent]) -> list[object]:
    """Plain events (self-describing ones off)."""
    return list(ConnectorEvents(False).kv_events(events))


def test_stores_are_one_event_per_chunk_with_its_key_hash_alone() -> None:
    events = kv_events([OffloadEvent((offload_key(h(1), 0), offload_key(h(2), 1)), False)])
    assert events == [BlockStored((h(1),), None, (), 0, None, 0, medium="CPU"),
                      BlockStored((h(2),), None, (), 0, None, 1, medium="CPU")]


def test_evictions_are_one_event_per_group_in_first_seen_order() -> None:
    keys = (offload_key(h(1), 1), offload_key(h(2), 0), offload_key(h(3), 1))
    assert kv_events([OffloadEvent(keys, True)]) == [
        BlockRemoved((h(1), h(3)), 1, medium="CPU"), BlockRemoved((h(2),), 0, medium="CPU")]


def test_a_failed_stores_bookkeeping_removal_announces_nothing() -> None:
    keys = (offload_key(h(1), 0),)
    assert kv_events([OffloadEvent(keys, True, metadata_only=True),
                      OffloadEvent(keys, False)]) == [
        BlockStored((h(1),), None, (), 0, None, 0, medium="CPU")]


def events_scheduler(enable: bool, num_cpu_chunks: int = 3) -> Scheduler:
    return make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                          enable_kv_cache_events=enable,
                          kv_connector=OffloadingSettings(num_cpu_chunks, 1))


def test_the_scheduler_announces_cpu_chunks_after_the_gpu_pools_events() -> None:
    scheduler = events_scheduler(enable=True)
    request = make_request("a", range(10, 23), BLOCK, max_tokens=3)  # three full blocks
    scheduler.add_request(request)
    run_step(scheduler)
    prompt = tuple(request.block_hashes)
    events = scheduler.take_events()
    assert [type(e).__name__ for e in events] == ["BlockStored"]  # the GPU pool's, one call
    assert events[0].medium == "GPU" and events[0].block_hashes == prompt
    run_step(scheduler, done=(0,))  # the store is reported: its chunks become readable
    cpu = scheduler.take_events()
    assert {e.block_hashes for e in cpu} == {(b,) for b in prompt}
    assert all(isinstance(e, BlockStored) and e.medium == "CPU" for e in cpu)
    scheduler.add_request(make_request("b", range(100, 113), BLOCK, max_tokens=1))
    run_step(scheduler)  # b's three chunks evict a's three (a 3-chunk tier)
    run_step(scheduler, done=(1,))
    removed = [e for e in scheduler.take_events()
               if isinstance(e, BlockRemoved) and e.medium == "CPU"]
    assert len(removed) == 1 and set(removed[0].block_hashes) == set(prompt)


def test_without_kv_events_the_connector_announces_nothing() -> None:
    scheduler = events_scheduler(enable=False)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    run_step(scheduler, done=(0,))
    assert scheduler.take_events() == []
