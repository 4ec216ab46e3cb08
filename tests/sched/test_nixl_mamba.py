"""The NIXL P/D connector beside a mamba 'align' group (full attention and mamba, blocks of 4):
the prefill side leaves its prompt's last token to the decode side (which computes the state
past it from the pulled one), exchanges carry a mamba group's running-state block alone, and a
decode side's local hit may run past a lagging mamba state when the pull brings the state."""

from __future__ import annotations

from impl.connector.nixl import ExchangeClip
from impl.connector.nixl_metadata import PullOrder
from impl.connector.types import NixlSettings
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.test_nixl_connector import BLOCK, decode, prefill, run_step

ALIGN = MambaSpec(BLOCK, mamba_cache_mode="align")


def mamba_pd_scheduler(retention: int | None = None) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, kv_connector=NixlSettings("fail", "pull"))
    groups = (KVCacheGroupSpec(("f",), FullAttentionSpec(BLOCK)), KVCacheGroupSpec(("m",), ALIGN))
    return Scheduler(config, KVCacheConfig(40, groups, prefix_cache_retention_interval=retention),
                     none_hash=NONE_HASH, log_stats=True)


def test_an_exchange_carries_the_running_states_block_only() -> None:
    """Of a mamba table, the block before the draft-state blocks (2 here), never the nulls
    or the superseded state before it; one block passes as it is."""
    drafts = MambaSpec(BLOCK, num_speculative_blocks=2, mamba_cache_mode="align")
    clip = ExchangeClip(KVCacheConfig(8, (KVCacheGroupSpec(("f",), FullAttentionSpec(BLOCK)),
                                          KVCacheGroupSpec(("m",), drafts))))
    assert clip.clip(([1, 2, 3], [0, 10, 11, 12, 24])) == ([1, 2, 3], [11])
    assert clip.clip(([1], [5])) == ([1], [5])
    assert clip.clip(([1], [5, 6])) == ([1], [5])


def test_a_prefill_leaves_its_prompts_last_token_to_the_decode_side() -> None:
    """A 20-token prefill keeps 19 tokens and samples one: mamba 'align' schedules 16 (the
    last block boundary before its final token) first."""
    scheduler = mamba_pd_scheduler()
    scheduler.add_request(prefill("p", range(10, 30), max_tokens=3))
    request = scheduler.requests["p"]
    assert (request.num_prompt_tokens, request.max_tokens) == (19, 1)
    assert request.kv_transfer is not None and request.kv_transfer.prompt_tail_left
    assert run_step(scheduler)[0] == {"p": 16}


def test_a_decode_side_pulls_all_but_the_last_prompt_token() -> None:
    scheduler = mamba_pd_scheduler()
    scheduler.add_request(decode("d", range(10, 30)))
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder(([1, 2, 3, 4, 5], [6]), (0, 0), True)}
    assert scheduler.requests["d"].num_computed_tokens == 19


def run_r_then(scheduler: Scheduler, prompt: list[int]) -> None:
    """Under sparse retention, r (20 tokens) computes and frees: full attention keeps its 5
    blocks cached, mamba only the state at the replay boundary (19, aligned down: 16)."""
    scheduler.add_request(make_request("r", range(10, 30), BLOCK, max_tokens=1))
    for _ in range(3):
        run_step(scheduler)
    scheduler.add_request(decode("d", prompt))


def test_a_local_hit_runs_past_a_lagging_state_when_the_pull_brings_it() -> None:
    """d shares r's 20 tokens: full attention hits 20, mamba 16. The pull of the rest (9 of
    its 30 tokens, the last left out) brings the state, so the local hit is 20 (5 blocks)."""
    scheduler = mamba_pd_scheduler(retention=0)
    run_r_then(scheduler, [*range(10, 30), *range(100, 110)])
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder(([7, 8, 9], [10]), (5, 0), True)}
    assert scheduler.kv_cache_manager.get_block_ids("d") == ([1, 2, 3, 4, 6, 7, 8, 9],
                                                             [0, 0, 0, 0, 0, 0, 0, 10])
    assert scheduler.requests["d"].num_computed_tokens == 29


def test_without_a_pull_the_hit_falls_back_to_what_every_group_agrees_on() -> None:
    """d is r's prompt plus one token: there is nothing to pull (all but its last token are
    local), so no state comes for the deeper hit: d resumes at 16, where mamba has one."""
    scheduler = mamba_pd_scheduler(retention=0)
    run_r_then(scheduler, [*range(10, 30), 500])
    scheduled, _, _ = run_step(scheduler)
    assert scheduled == {"d": 4}
    assert scheduler.kv_cache_manager.get_block_ids("d") == ([1, 2, 3, 4, 7], [0, 0, 0, 5, 8])


def test_hashed_finer_than_the_block_a_local_hit_ends_inside_a_block() -> None:
    """Blocks of 4 hashed every 2. r (15 tokens) keys its prompt's tail at 14, inside its
    fourth block, and keeps it in a copy (6 -> 7) as it decodes. s sends r's prompt and one
    more token: with the NIXL connector the hit is looked up group by group, on hash
    boundaries as without one: full attention's three blocks and r's tail block to 14, the
    state at 14; both shared blocks are copied (5 -> 6, 7 -> 8) and s computes 2 tokens."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, hash_block_size=2,
                             kv_connector=NixlSettings("fail", "pull"))
    groups = (KVCacheGroupSpec(("f",), FullAttentionSpec(BLOCK)), KVCacheGroupSpec(("m",), ALIGN))
    scheduler = Scheduler(config, KVCacheConfig(40, groups), none_hash=NONE_HASH,
                          log_stats=True)
    scheduler.add_request(make_request("r", range(10, 25), 2, max_tokens=1))
    assert [run_step(scheduler)[0] for _ in range(4)] == [{"r": 12}, {"r": 2}, {"r": 1}, {}]
    scheduler.add_request(make_request("s", [*range(10, 25), 99], 2, max_tokens=1))
    output = scheduler.schedule()
    assert dict(output.num_scheduled_tokens) == {"s": 2}
    assert output.kv_cache_block_copies == [(5, 6), (7, 8)]
    assert scheduler.kv_cache_manager.get_block_ids("s") == ([1, 2, 3, 6], [0, 0, 0, 8])
