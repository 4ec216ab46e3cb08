"""The connector's prefix-cache stats (`Scheduler.connector_prefix_cache_stats`): per admitted
lookup the tokens past the local hit it was asked for and those it supplies, its hits split by
the tier they came from, preempted requests apart, a reset flagged; and the disk backend of
the CPU tier (its events' medium, its hits' source).

Layouts: full attention, blocks of 4 tokens; prompts of 13 tokens (a hit of 12)."""

from __future__ import annotations

import pytest

from impl.connector.offloading.hit_sources import load_ranges, split_by_source
from impl.connector.offloading.request_state import GroupShape
from impl.connector.types import OffloadSettings
from impl.core.events import BlockStored
from impl.core.prefix_stats import CacheHitSource, PrefixCacheStats
from impl.core.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.offload_helpers import (
    BLOCK,
    evict_prefix_then_resend,
    offload_scheduler,
    run_step,
    stores_done,
)
from tests.sched.test_multi_connector import Fake, multi
from tests.sched.test_nixl_connector import decode, nixl_scheduler
from tests.sched.test_nixl_connector import run_step as nixl_step
from tests.sched.test_offloading_connector import run_step as offloading_step
from tests.sched.test_offloading_windows import hybrid_scheduler, store_then_evict

HOST, DISK = CacheHitSource.HOST, CacheHitSource.DISK
UNSPECIFIED = CacheHitSource.EXTERNAL_UNSPECIFIED


def stats_after(scheduler: Scheduler) -> PrefixCacheStats:
    made = scheduler.make_stats()
    assert made is not None and made.connector_prefix_cache_stats is not None
    return made.connector_prefix_cache_stats


@pytest.mark.parametrize(("backend", "source"), [("cpu", HOST), ("disk", DISK)])
def test_a_cpu_hit_is_counted_under_its_backends_source(backend: str,
                                                        source: CacheHitSource) -> None:
    """`c` resends a prompt the GPU lost: asked for all 13 tokens (no local hit), the tier
    supplies 12. The two earlier lookups (a, b) found nothing there."""
    scheduler = offload_scheduler(backend=backend)
    evict_prefix_then_resend(scheduler)
    assert stats_after(scheduler) == PrefixCacheStats(requests=2, queries=13 + 60)
    run_step(scheduler)
    assert stats_after(scheduler) == PrefixCacheStats(requests=1, queries=13, hits=12,
                                                      hits_by_source={source: 12})
    assert stats_after(scheduler) == PrefixCacheStats()  # handed out: counted afresh


def test_a_local_hit_is_not_asked_of_the_connector() -> None:
    """`b` resends `a`'s prompt while the GPU still holds it: 12 tokens hit locally, so the
    connector is asked for the 1 left (and has none)."""
    scheduler = offload_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    run_step(scheduler)
    stats_after(scheduler)
    scheduler.add_request(make_request("b", range(10, 23), BLOCK, max_tokens=1))
    run_step(scheduler)
    assert stats_after(scheduler) == PrefixCacheStats(requests=1, queries=1)


def test_a_reset_of_the_connectors_cache_is_flagged() -> None:
    scheduler = hybrid_scheduler(retention=None)  # (the OffloadingConnector resets)
    assert scheduler.reset_connector_cache()
    assert stats_after(scheduler) == PrefixCacheStats(reset=True)


def test_an_inert_cpu_tier_still_counts_lookups_and_resets() -> None:
    """Prefix caching off leaves the tier inert, yet upstream's connector is there: every
    admission is a lookup of the whole prompt that finds nothing."""
    scheduler = make_scheduler(12, block_size=BLOCK, enable_prefix_caching=False,
                               kv_connector=OffloadSettings(16))
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    run_step(scheduler)
    assert scheduler.reset_connector_cache()
    assert stats_after(scheduler) == PrefixCacheStats(reset=True, requests=1, queries=13)


def test_without_a_connector_or_stats_there_are_none() -> None:
    made = make_scheduler(12, block_size=BLOCK).make_stats()
    assert made is not None and made.connector_prefix_cache_stats is None


def test_a_preempted_requests_lookup_is_counted_apart_and_never_split() -> None:
    stats = PrefixCacheStats()
    stats.record(13, 12, preempted=True, hits_by_source={HOST: 12})
    assert stats == PrefixCacheStats(preempted_requests=1, preempted_queries=13,
                                     preempted_hits=12)


def test_a_split_that_does_not_add_up_is_reported_unspecified() -> None:
    stats = PrefixCacheStats()
    stats.record(13, 12, preempted=False, hits_by_source={HOST: 8})
    stats.record(13, 4, preempted=False, hits_by_source={HOST: 4, DISK: 0})
    assert stats.hits_by_source == {UNSPECIFIED: 12, HOST: 4}


def test_the_disk_backend_announces_its_copies_on_storage() -> None:
    """The prefill's three blocks: stored on the GPU in step 0, their copies (chosen in step
    0, reported done in step 1) on the disk tier."""
    disk = make_scheduler(16, block_size=BLOCK, max_num_batched_tokens=64,
                          enable_kv_cache_events=True,
                          kv_connector=OffloadSettings(32, backend="disk"))
    disk.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(disk)
    run_step(disk, stores_done(0))
    stored = [e.medium for e in disk.take_events() if isinstance(e, BlockStored)]
    assert stored == ["GPU"] + ["STORAGE"] * 3


def test_a_bad_backend_or_failure_policy_is_refused_by_field() -> None:
    with pytest.raises(ValueError, match=r"kv_connector.backend: must be 'cpu' or 'disk'"):
        OffloadSettings(8, backend="nvme")
    with pytest.raises(ValueError, match=r"kv_connector.load_failure_policy: must be 'fail'"):
        OffloadSettings(8, load_failure_policy="retry")


def test_a_nixl_pull_is_counted_as_read_from_the_peer() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 23)))
    nixl_step(scheduler)
    assert stats_after(scheduler) == PrefixCacheStats(requests=1, queries=13, hits=13,
                                                      hits_by_source={CacheHitSource.P2P: 13})


def test_the_multi_connector_reports_the_owners_split() -> None:
    class Sourced(Fake):
        def get_external_cache_hit_sources(self, request: object,
                                           num: int) -> dict[CacheHitSource, int]:
            return {HOST: num}

    connector = multi(Fake(claim=0), Sourced(claim=8))
    request = make_request("r", range(13), BLOCK)
    assert connector.get_external_cache_hit_sources(request, 8) == {UNSPECIFIED: 8}
    connector.get_num_new_matched_tokens(request, 0)
    assert connector.get_external_cache_hit_sources(request, 8) == {HOST: 8}


def test_the_offloading_hit_is_host_where_a_loaded_chunk_covers_it() -> None:
    """Full attention beside a window: the full-attention group's three chunks cover the whole
    hit of 12 (the window loads chunk 2 only)."""
    scheduler = hybrid_scheduler(retention=None, num_blocks=9)
    store_then_evict(scheduler, range(10, 23))
    stats_after(scheduler)
    scheduler.add_request(make_request("b", range(10, 23), BLOCK, max_tokens=1))
    offloading_step(scheduler)
    assert stats_after(scheduler) == PrefixCacheStats(requests=1, queries=13, hits=12,
                                                      hits_by_source={HOST: 12})


def shape(spec: FullAttentionSpec | SlidingWindowSpec | MambaSpec,
          blocks_per_chunk: int = 2) -> GroupShape:
    return GroupShape(0, 4, 4 * blocks_per_chunk, blocks_per_chunk, spec)


def test_a_windowed_groups_load_covers_its_chunks_from_the_first_filled_block() -> None:
    """Chunks of 8 tokens: a hit from 0 to 30 whose window fills blocks from 5 (token 20)
    reads chunks 2 and 3, covering 20..24 (block 5 in chunk 2) and 24..30."""
    window = shape(SlidingWindowSpec(4, sliding_window=9))
    assert load_ranges(window, 5, 0, 30, 2) == [(20, 24), (24, 30)]
    assert load_ranges(shape(FullAttentionSpec(4)), 1, 4, 17, 2) == [
        (4, 8), (8, 16), (16, 17)]
    assert load_ranges(shape(MambaSpec(block_size=4)), 3, 12, 30, 2) == [(12, 30)]


def test_tokens_no_loaded_chunk_covers_are_unspecified() -> None:
    assert split_by_source([(20, 24), (24, 30)], 0, 30) == {HOST: 10, UNSPECIFIED: 20}
    assert split_by_source([(4, 12), (8, 16), (14, 20)], 4, 12) == {HOST: 12}
    assert split_by_source([(0, 8), (20, 30)], 4, 20) == {HOST: 8, UNSPECIFIED: 12}
    assert split_by_source([], 0, 5) == {UNSPECIFIED: 5}
