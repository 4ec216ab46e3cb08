"""A chain of MTP modules (`spec_method "mtp"`, `num_mtp_modules` > 1): the drafter reads
`num_spec_tokens` prompt tokens past each chunk, so no chunk ends within that many tokens of
the prefill's end (`reserve_prefill_lookahead`), the last `num_spec_tokens - 1` computed
tokens are not indexed (they may be prefilled again), and 0.33's hashes cover that many
tokens past each block. One module, or EAGLE, reads a single token. Exact token counts."""

from __future__ import annotations

import pytest

from impl.behaviour import behaviour_for
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from impl.sched.admission_rules import reserve_prefill_lookahead
from impl.sched.config import SchedulerConfig
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, step


def _config(modules: int = 3, method: str = "mtp", release: str = "0.32.0",
            budget: int = 32) -> SchedulerConfig:
    return SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=budget, max_model_len=256,
                           num_spec_tokens=3, num_lookahead_tokens=3, spec_method=method,
                           num_mtp_modules=modules, behaviour=behaviour_for(release))


def _scheduler(config: SchedulerConfig) -> Scheduler:
    kv_config = KVCacheConfig(40, (KVCacheGroupSpec(("full",), FullAttentionSpec(16)),))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def _request(scheduler: Scheduler, request_id: str, prompt: range) -> Request:
    hasher = RequestBlockHasher(16, "sha256", NONE_HASH,
                                lookahead=scheduler.scheduler_config.num_hash_lookahead_tokens)
    return Request(request_id, prompt, block_hasher=hasher, max_tokens=1, eos_token_id=2)


@pytest.mark.parametrize(("method", "modules", "lookahead"), [
    ("mtp", 3, 3), ("mtp", 2, 3), ("mtp", 1, 1), ("eagle", 3, 1), ("ngram", 1, 0)])
def test_the_prefill_lookahead_is_the_draft_count_for_a_chain(method: str, modules: int,
                                                             lookahead: int) -> None:
    config = _config(modules, method)
    assert config.num_prefill_lookahead == lookahead
    assert config.use_eagle == (method != "ngram")
    # 0.33 hashes cover the look-ahead (no connector, prefix caching on).
    assert _config(modules, method, "0.33.0").num_hash_lookahead_tokens == lookahead


def test_a_chunk_either_finishes_the_prefill_or_leaves_the_lookahead() -> None:
    request = Request("a", range(34), max_tokens=1, eos_token_id=2)
    assert reserve_prefill_lookahead(request, 0, 32, 3) == 31  # 2 left: cut to leave 3
    assert reserve_prefill_lookahead(request, 0, 31, 3) == 31  # 3 left: as it is
    assert reserve_prefill_lookahead(request, 0, 34, 3) == 34  # the prefill's end
    assert reserve_prefill_lookahead(request, 32, 1, 3) == 0  # 1 left of 3: nothing fits
    assert reserve_prefill_lookahead(request, 0, 33, 1) == 33  # an EAGLE head never cuts


def test_the_scheduler_stops_chunks_short_of_the_prefill_end() -> None:
    """34 tokens, a budget of 32: the first chunk would leave 2, so it takes 31 and the
    second the last 3. With one MTP module the chunks are 32 and 2."""
    for modules, chunks in ((3, [31, 3]), (1, [32, 2])):
        scheduler = _scheduler(_config(modules))
        scheduler.add_request(_request(scheduler, "a", range(1000, 1034)))
        assert [step(scheduler)[0].num_scheduled_tokens["a"] for _ in range(2)] == chunks


def test_a_running_prefill_stops_short_of_its_end_too() -> None:
    """66 tokens, a budget of 32: admitted with 32, the running request's next chunk of 32
    would leave 2, so it takes 31 and the last chunk 3."""
    scheduler = _scheduler(_config(3))
    scheduler.add_request(_request(scheduler, "a", range(1000, 1066)))
    assert [step(scheduler)[0].num_scheduled_tokens["a"] for _ in range(3)] == [32, 31, 3]


def test_the_last_tokens_a_chain_may_prefill_again_are_not_indexed() -> None:
    """A 40-token prompt in chunks of 16 (budget 16; no cut: 24, then 8 remain). With three
    modules the last 2 computed tokens may be prefilled again: after 16 tokens 14 are final,
    no whole block is indexed; after 32, 30 are: one block. One module indexes a block after
    16 tokens and two after 32. The running request's second chunk takes the same rule (no
    short path around it)."""
    for modules, cached in ((3, [0, 1]), (1, [1, 2])):
        scheduler = _scheduler(_config(modules, budget=16))
        scheduler.add_request(_request(scheduler, "a", range(1000, 1040)))
        manager = scheduler.kv_cache_manager.coordinator.managers[0]
        counts = []
        for _ in range(2):
            step(scheduler)
            counts.append(manager.num_cached_block["a"])
        assert counts == cached, modules


def test_a_mamba_checkpoint_leaves_room_for_the_hash_lookahead() -> None:
    """Under 0.33 a block's hash covers the look-ahead tokens past it, so the last state a
    resend of 34 tokens can resume from ends 3 tokens or more before the end (16, not 32)."""
    from impl.core.mamba_boundaries import checkpoint_boundary

    assert checkpoint_boundary(34, 16, False) == 32
    assert checkpoint_boundary(34, 16, False, hash_lookahead=1) == 32
    assert checkpoint_boundary(34, 16, False, hash_lookahead=2) == 32
    assert checkpoint_boundary(34, 16, False, hash_lookahead=3) == 16
    assert checkpoint_boundary(2, 16, False, hash_lookahead=3) == 0
    assert checkpoint_boundary(34, 16, True, hash_lookahead=3) == 16  # the block drop rules


@pytest.mark.parametrize(("use_eagle", "expected"), [(True, [15, 31, 38]), (False, [16, 32, 32])])
def test_a_hybrid_model_indexes_past_the_boundary_only_finalized_tokens(
        use_eagle: bool, expected: list[int]) -> None:
    """Full attention beside a sliding window, blocks of 16. With EAGLE's block drop a group
    indexes one block past the aligned boundary, up to the finalized tokens (all but the
    chain's last 2); without it, the aligned prefix (as upstream holds nothing back there)."""
    from impl.core.coordinator import get_kv_cache_coordinator
    from impl.core.specs import SlidingWindowSpec

    coordinator = get_kv_cache_coordinator(KVCacheConfig(20, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(16)),
        KVCacheGroupSpec(("window",), SlidingWindowSpec(16, sliding_window=32)))),
        enable_caching=True, hash_block_size=16, enable_kv_cache_events=False,
        use_eagle=use_eagle)
    coordinator.num_reprefillable_tokens = 2
    assert [coordinator.get_num_cacheable_tokens(n, 1) for n in (17, 33, 40)] == expected


def test_a_chain_beside_mamba_under_sparse_retention_keys_the_last_hashed_state() -> None:
    """Under 0.33 a chain of three modules hashes 3 tokens past each block. A 33-token prompt:
    sparse retention keeps the state before the replay boundary (32, block 1), whose hash
    needs 35 tokens and never exists; a resend hits 16 at most. The chunk stops at 16 and
    mamba keys the state there whole (its block, as upstream's prompt-tail rule does), though
    the retention mask leaves block 0 out (0.33 keeps no state of this prompt without it)."""
    from impl.core.mamba_align import MambaAlignManager
    from impl.core.specs import MambaSpec

    kv_config = KVCacheConfig(40, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(16)),
        KVCacheGroupSpec(("ssm",), MambaSpec(16, mamba_cache_mode="align"))),
        prefix_cache_retention_interval=0)
    scheduler = Scheduler(_config(release="0.33.0", budget=64), kv_config,
                          none_hash=NONE_HASH, log_stats=False)
    hasher = RequestBlockHasher(16, "sha256", NONE_HASH,
                                lookahead=scheduler.scheduler_config.num_hash_lookahead_tokens)
    scheduler.add_request(Request("a", range(33), block_hasher=hasher, max_tokens=4,
                                  ignore_eos=True))
    out, _ = step(scheduler)
    assert out.num_scheduled_tokens == {"a": 16}
    out, _ = step(scheduler)
    assert out.num_scheduled_tokens == {"a": 17}
    ssm = scheduler.kv_cache_manager.coordinator.managers[1]
    assert isinstance(ssm, MambaAlignManager)
    blocks = ssm.req_to_blocks["a"]
    keyed = [i for i, block in enumerate(blocks)
             if not block.is_null and block.block_hash is not None]
    assert keyed == [0]
    scheduler.check_integrity()


def test_multi_turn_beside_mamba_with_finer_hashes_runs_under_0_33() -> None:
    """`eagle-mamba-sub-block` with a chain of two MTP modules under 0.33: the look-ahead
    hashes stop two tokens short of what is computed, and no prompt-tail boundary may be
    taken past them (an IndexError before). The run ends in upstream's stall
    (`conformance/upstream_bugs/mtp-chain-mamba-tail-stall.jsonl`), not in an error."""
    from dataclasses import replace

    from conformance.sched.lockstep import run_lockstep
    from conformance.sched.suite import SUITE
    from conformance.systems.registry import resolve_system

    workload = SUITE["eagle-mamba-sub-block"].make()
    workload = replace(workload, config=replace(
        workload.config, spec_method="mtp", mtp_modules=2, num_spec_tokens=2,
        num_lookahead_tokens=2))
    twin = resolve_system("impl==0.33.0")
    result = run_lockstep(workload, twin, twin)
    assert result.error is None and result.steps > 200
    assert result.stall is not None and result.stall.agreed


def test_admission_counts_the_window_from_the_prefix_hit() -> None:
    """`b` (50 tokens) hits `a`'s first block (16; 0.32's EAGLE family gives up the second):
    a chunk of 32 would leave 2 tokens, so it takes 31 and leaves 3."""
    scheduler = _scheduler(_config(3))
    scheduler.add_request(_request(scheduler, "a", range(1000, 1034)))
    for _ in range(3):
        step(scheduler)
    scheduler.add_request(_request(scheduler, "b", range(1000, 1050)))
    output, _ = step(scheduler)
    assert [(r.req_id, r.num_computed_tokens) for r in output.scheduled_new_reqs] == [("b", 16)]
    assert output.num_scheduled_tokens == {"b": 31}


def test_the_block_past_the_boundary_is_the_groups_own() -> None:
    """Groups of 16 and 32 tokens (a scheduler block of 32): with EAGLE's block drop and a
    chain's 2 reprefillable tokens, 62 computed tokens leave 60 final; the 16-token group
    indexes its block past the 32-token boundary (48), not every final token."""
    from impl.core.coordinator import get_kv_cache_coordinator
    from impl.core.specs import SlidingWindowSpec

    coordinator = get_kv_cache_coordinator(KVCacheConfig(20, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(16)),
        KVCacheGroupSpec(("window",), SlidingWindowSpec(32, sliding_window=64)))),
        enable_caching=True, hash_block_size=16, enable_kv_cache_events=False, use_eagle=True)
    coordinator.num_reprefillable_tokens = 2
    assert [coordinator.get_num_cacheable_tokens(62, group) for group in (0, 1)] == [48, 60]
