"""Decode context parallelism (`impl.core.context_parallel`): the scheduler's view of the KV
cache, the layouts the twin refuses, and the upstream crash it reproduces. Exact block ids."""

from __future__ import annotations

import pytest

from impl.connector.types import (
    MultiSettings,
    NixlSettings,
    OffloadingSettings,
    OffloadSettings,
)
from impl.core.context_parallel import check_reused_block_events, dcp_scheduler_view
from impl.core.events import BlockStored
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    ReferenceWindowSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from tests.core.helpers import admit, make_request
from vtwin.errors import ReleaseCheckFailed


def config(*specs: KVCacheSpec, num_blocks: int = 16) -> KVCacheConfig:
    return KVCacheConfig(num_blocks, tuple(KVCacheGroupSpec((f"l{i}",), s)
                                           for i, s in enumerate(specs)))


def dcp_manager(dcp: int, num_blocks: int = 16, events: bool = False) -> KVCacheManager:
    view = dcp_scheduler_view(config(FullAttentionSpec(block_size=4), num_blocks=num_blocks), dcp)
    return KVCacheManager(view, max_model_len=256, hash_block_size=4 * dcp, enable_caching=True,
                          log_stats=True, enable_kv_cache_events=events)


def test_the_view_scales_full_attention_blocks_by_the_ranks() -> None:
    plain = config(FullAttentionSpec(block_size=16), FullAttentionSpec(block_size=16),
                   MambaSpec(block_size=16, mamba_cache_mode="align"))
    assert dcp_scheduler_view(plain, 1) is plain
    view = dcp_scheduler_view(plain, 2)
    assert (view.block_sizes, view.dcp_world_size) == ([32, 32, 16], 2)
    assert dcp_scheduler_view(plain, 4).num_blocks == plain.num_blocks


@pytest.mark.parametrize("spec", [SlidingWindowSpec(block_size=16, sliding_window=32),
                                  ReferenceWindowSpec(block_size=16, rswa_window=8)])
def test_groups_other_than_full_attention_are_refused_under_dcp(spec: KVCacheSpec) -> None:
    layout = config(FullAttentionSpec(block_size=16), spec)
    with pytest.raises(ValueError, match=r"kv_cache_groups\[1\]: .* decode_context_parallel_size"):
        dcp_scheduler_view(layout, 2)
    assert dcp_scheduler_view(layout, 1) is layout


def test_a_block_holds_every_ranks_share_of_the_tokens() -> None:
    """Blocks of 4 tokens on each of 2 ranks: a 20-token prompt takes ceil(20 / 8) = 3 blocks,
    and a second prompt sharing its first 17 tokens hits the 2 full 8-token blocks."""
    manager = dcp_manager(2)
    first = make_request("a", range(20), block_size=8)
    assert admit(manager, first) == [[1, 2, 3]]
    manager.cache_blocks(first, 20)
    second = make_request("b", [*range(17), 90, 91, 92, 93], block_size=8)
    hits, num_hit = manager.get_computed_blocks(second)
    assert (hits.get_block_ids(), num_hit) == (([1, 2],), 16)
    assert admit(manager, second) == [[1, 2, 4]]


def test_a_full_report_hit_under_dcp_stops_as_upstream_does() -> None:
    """Upstream views the scheduler-block hashes at the per-rank block size to report a hit's
    reused blocks in full, and asserts; the twin raises the same release check. Without a
    hit, or with hashes that divide the per-rank block, nothing stops."""
    manager = dcp_manager(2, events=True)
    first = make_request("a", range(20), block_size=8)
    admit(manager, first)
    manager.cache_blocks(first, 20)
    miss = make_request("miss", range(100, 120), block_size=8, report_reused_blocks=True)
    assert manager.get_computed_blocks(miss)[1] == 0
    hit = make_request("hit", range(20), block_size=8, report_reused_blocks=True)
    with pytest.raises(ReleaseCheckFailed, match="dcp-reused-block-events") as caught:
        manager.get_computed_blocks(hit)
    assert "request hit" in str(caught.value)
    check_reused_block_events("any", 0, 16, 16)
    check_reused_block_events("any", 0, 16, 8)
    with pytest.raises(ReleaseCheckFailed):
        check_reused_block_events("any", 0, 16, 32)


def test_a_full_report_at_hashes_dividing_a_ranks_block_is_made_at_that_block() -> None:
    """Hashes finer than the view's blocks (4 tokens under 2 ranks' 4-token blocks, as beside
    a mamba group) divide a rank's block: upstream reports the hit without stopping, at the
    per-rank block, one per hit block of the view (so the first 4 tokens of each 8); the twin
    alike."""
    view = dcp_scheduler_view(config(FullAttentionSpec(block_size=4),
                                     FullAttentionSpec(block_size=4), num_blocks=32), 2)
    manager = KVCacheManager(view, max_model_len=256, hash_block_size=4, enable_caching=True,
                             log_stats=True, enable_kv_cache_events=True)
    first = make_request("a", range(20), block_size=4)
    assert admit(manager, first) == [[1, 2, 3], [4, 5, 6]]
    manager.cache_blocks(first, 20)
    manager.take_events()
    hit = make_request("hit", range(20), block_size=4, report_reused_blocks=True)
    hits, num_hit = manager.get_computed_blocks(hit)
    assert (hits.get_block_ids(), num_hit) == (([1, 2], [4, 5]), 16)
    stored = [e for e in manager.take_events() if isinstance(e, BlockStored)]
    assert [(e.group_id, e.block_size, tuple(e.token_ids)) for e in stored] == [
        (0, 4, tuple(range(8))), (1, 4, tuple(range(8)))]


def test_the_scheduler_hashes_at_its_own_block_and_refuses_p_d_only() -> None:
    settings = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                               block_size=16, decode_context_parallel_size=4)
    assert (settings.scheduler_block_size, settings.effective_hash_block_size) == (64, 64)
    with pytest.raises(ValueError, match="decode_context_parallel_size: must be >= 1"):
        SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                        decode_context_parallel_size=0)
    for nixl in (NixlSettings(), MultiSettings((NixlSettings(), OffloadingSettings(8, 1)))):
        with pytest.raises(ValueError, match="upstream refuses P/D .* with DCP"):
            SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                            decode_context_parallel_size=2, kv_connector=nixl)
    for tier in (OffloadSettings(8), OffloadingSettings(8, 1)):  # the CPU tiers run under DCP
        SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                        decode_context_parallel_size=2, kv_connector=tier)
