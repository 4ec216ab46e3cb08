"""The engine's `enable_mamba_shared_prefix_checkpoint`: mamba 'align' also keeps the state at a
request's shared-prefix junction (`impl.sched.manager_rules.takes_junction_checkpoints`, the
split's exact junction stop, `impl.core.mamba_prompt_tail`), with exact chunk lengths and
block ids."""

from __future__ import annotations

import pytest

from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.mamba_split import MambaAlignedSplit
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.core.test_partial_hits import drain, mamba, request, step, sub_block_manager
from tests.sched.helpers import NONE_HASH
from tests.sched.test_mamba_split import request as split_request

EXACT = MambaAlignedSplit(block_size=16, max_chunk_tokens=64, exact_junction=True)
FLOORED = MambaAlignedSplit(block_size=16, max_chunk_tokens=64)


def at(num_prompt: int, computed: int, junction: int, outputs: int = 0) -> Request:
    """The split tests' request (`tests.sched.test_mamba_split.request`), junction first."""
    return split_request(num_prompt, computed, outputs, junction)


def test_the_chunk_stops_at_the_junction_itself_not_the_block_below() -> None:
    """Prompt 120 from 64: a junction at 84 (inside block 5) ends the chunk there (20 tokens);
    without the option the chunk ends at the block boundary below it (80)."""
    assert EXACT.clip(at(120, 64, 84), 56) == 20
    assert FLOORED.clip(at(120, 64, 84), 56) == 16
    # A junction on the block grid is the same stop either way.
    assert EXACT.clip(at(120, 64, 96), 56) == FLOORED.clip(at(120, 64, 96), 56) == 32


def test_a_junction_past_the_prompt_falls_back_to_the_block_below() -> None:
    """A resumed request replays its outputs as prefill (prompt 70 + 40 outputs): the manager
    keys no state past the prompt, so a junction at 84 stops at 80; one at 68, inside the
    prompt, stops there."""
    assert EXACT.clip(at(70, 64, 84, outputs=40), 40) == 16
    assert EXACT.clip(at(70, 64, 68, outputs=40), 40) == 4
    assert EXACT.clip(at(68, 64, 68, outputs=40), 40) == 4  # at the prompt's end: still in
    assert FLOORED.clip(at(70, 64, 68, outputs=40), 40) == 32  # 64 -> 96, the next stop


def test_a_chunk_ending_at_the_junction_keys_the_state_there() -> None:
    """Blocks of 8, hashes of 2: a 30-token prompt whose junction is 12 (inside block 1) is
    computed to 12: mamba keys its state block there under the hash at 12 and copies it before
    the next chunk overwrites it; without the option nothing is keyed at 12."""
    for junctions in (True, False):
        manager = sub_block_manager()
        mamba(manager).junction_checkpoints = junctions
        x = request("x", list(range(30)))
        x.shared_prefix_boundary = 12
        step(manager, x, 12)
        state = manager.get_block_ids("x")[1][-1]
        keyed = manager.block_pool.blocks[state].block_hash == x.block_hashes[5]
        assert keyed is junctions
        assert ("x" in mamba(manager).partial_hit_reqs) is junctions
        step(manager, x, 4)
        assert drain(manager) == ([(state, 4)] if junctions else [])
        manager.check_integrity()


def test_a_junction_reached_again_or_past_the_prompt_is_not_keyed() -> None:
    """The state is keyed only by the cache call that ends a prompt chunk at the junction:
    not by a call landing there when the request has already computed that far, nor past the
    prompt (a resumed request replaying its outputs)."""
    manager = sub_block_manager()
    group = mamba(manager)
    group.junction_checkpoints = True
    x = request("x", list(range(30)))
    step(manager, x, 12)  # no junction yet: 12 is not the prompt's tail (28)
    assert "x" not in group.partial_hit_reqs
    x.shared_prefix_boundary = 12
    group.cache_blocks(x, x.block_hashes, 12)  # x.num_computed_tokens is 12
    assert "x" not in group.partial_hit_reqs
    x.num_computed_tokens = 8
    group.cache_blocks(x, x.block_hashes, 12)  # the same call ending a chunk from 8
    assert "x" in group.partial_hit_reqs
    y = request("y", list(range(10)))
    y.append_output_token_ids([50, 51, 52, 53])
    y.shared_prefix_boundary = 12  # past the 10-token prompt
    step(manager, y, 12)
    assert "y" not in group.partial_hit_reqs


def _scheduler(**settings: object) -> Scheduler:
    chosen: dict[str, object] = {
        "hash_block_size": 4, "num_spec_tokens": 2, "num_lookahead_tokens": 2,
        "spec_method": "eagle", "enable_mamba_shared_prefix_checkpoint": True, **settings}
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                             **chosen)  # type: ignore[arg-type]
    groups = KVCacheConfig(64, (
        KVCacheGroupSpec(("attn",), FullAttentionSpec(block_size=16)),
        KVCacheGroupSpec(("ssm",), MambaSpec(block_size=16, mamba_cache_mode="align"))))
    return Scheduler(config, groups, none_hash=NONE_HASH, log_stats=False)


@pytest.mark.parametrize(("settings", "on"), [
    ({}, True),
    ({"enable_mamba_shared_prefix_checkpoint": False}, False),
    ({"spec_method": "ngram", "num_lookahead_tokens": 0}, False),  # no EAGLE
    ({"hash_block_size": 16}, False),  # hashes at the block: no sub-block hits
    ({"spec_method": "mtp", "num_mtp_modules": 2}, False),  # a chain re-prefills 1 token
    ({"spec_method": "mtp", "num_mtp_modules": 1}, True),  # one module: EAGLE's rules
])
def test_the_option_takes_effect_only_where_upstream_lets_it(settings: dict[str, object],
                                                             on: bool) -> None:
    built = _scheduler(**settings)
    assert built.mamba_split is not None
    assert built.mamba_split.exact_junction is on
    assert mamba_manager_flag(built) is on


def mamba_manager_flag(built: Scheduler) -> bool:
    flags = [getattr(m, "junction_checkpoints", None)
             for m in built.kv_cache_manager.coordinator.managers]
    assert flags[0] is None  # full attention has no such flag
    return bool(flags[1])
