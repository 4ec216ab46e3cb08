"""0.33's sync loads on the OffloadingConnector (`impl.connector.offloading.sync_loads`),
inside the scheduler, with exact block ids, job ids and budgets: a hit within the step's
budget is counted as computed and its request scheduled in the same step (the job flagged
`sync`, finished in that step's output, never waited for), the budget is spent in admission
order, and 0.32 ignores it."""

from __future__ import annotations

import pytest

from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33, Behaviour
from impl.connector.offloading.sync_loads import SyncLoads, kv_bytes_per_token
from impl.connector.types import KVConnectorOutput, OffloadingSettings
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.output import ModelRunnerOutput
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request
from tests.sched.test_offload_limits import PROMPT, store_and_evict
from tests.sched.test_offloading_connector import BLOCK, connector, offloading_scheduler, run_step
from vtwin.errors import ReleaseCheckFailed

LONGER = range(10, 34)
OTHER = range(200, 220)
"""`a`'s prompt (`PROMPT`, 20 tokens) and four more."""
HIT_BYTES = 20 * 512
"""A CPU hit of `a`'s whole prompt after `store_and_evict`: five chunks of one block, 512 bytes
a token (one full-attention group: K and V, one head of 64 float32 values)."""


def sync_scheduler(budget: int, behaviour: Behaviour = BEHAVIOUR_0_33) -> Scheduler:
    scheduler = offloading_scheduler(num_blocks=17, behaviour=behaviour,
                                     sync_load_budget_bytes=budget)
    store_and_evict(scheduler)
    return scheduler


def test_a_hit_within_the_budget_runs_in_its_step() -> None:
    scheduler = sync_scheduler(HIT_BYTES)
    scheduler.add_request(make_request("c", LONGER, BLOCK, max_tokens=2))
    output = scheduler.schedule()
    # Scheduled at once past the 20 loaded tokens, its blocks hashed at allocation.
    assert output.num_scheduled_tokens == {"c": 4}
    (new,) = output.scheduled_new_reqs
    assert (new.req_id, new.num_computed_tokens) == ("c", 20)
    assert scheduler.requests["c"].status == RequestStatus.RUNNING
    assert scheduler.step_external_hits == [("c", 20)]
    assert output.has_sync_kv_loads  # the worker waits for the load before the forward
    meta = output.kv_connector_metadata
    (load_id, load), = meta.load_jobs.items()  # type: ignore[union-attr]
    assert (load.sync, load.gpu.block_ids, load.gpu.block_indices, load.cpu_slots) == (
        True, (1, 2, 3, 4, 5), (0,), (0, 1, 2, 3, 4))
    (store_id, store), = meta.store_jobs.items()  # type: ignore[union-attr]
    # Its sixth chunk, computed in this step, is stored beside the load.
    assert (store.gpu.block_ids, store.gpu.block_indices, store.cpu_slots) == ((16,), (5,), (21,))
    offloading = connector(scheduler)
    assert offloading.jobs[load_id].is_sync_load
    assert offloading.chunks_being_loaded == set()  # done before the step runs: nobody waits
    scheduler.check_integrity()  # a sync load may sit beside the request's store
    assert offloading.sync_loads.requests == set()  # the step's reservations are spent
    # The worker finishes the load within the step; the request was never waiting for it.
    scheduler.update_from_output(output, ModelRunnerOutput(
        ["c"], {"c": 0}, [[7]], kv_connector_output=KVConnectorOutput(
            completed_jobs=((load_id, 1),))))
    scheduler.check_integrity()
    assert set(offloading.jobs) == {store_id}
    assert scheduler.requests["c"].num_output_tokens == 1
    assert not scheduler.schedule().has_sync_kv_loads  # c decodes: nothing loads now


@pytest.mark.parametrize(("budget", "prompt"), [(HIT_BYTES - 1, LONGER), (1 << 30, PROMPT)],
                         ids=["past-the-budget", "nothing-left-to-compute"])
def test_a_hit_loads_asynchronously(budget: int, prompt: range) -> None:
    """A hit past the step's budget, or one covering the whole prompt (the step must
    compute a token of it), loads asynchronously."""
    scheduler = sync_scheduler(budget)
    scheduler.add_request(make_request("c", prompt, BLOCK, max_tokens=2))
    output, meta = run_step(scheduler)
    assert output.num_scheduled_tokens == {}
    assert not output.has_sync_kv_loads
    assert scheduler.requests["c"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    (load,) = meta.load_jobs.values()
    assert not load.sync
    assert connector(scheduler).sync_loads.num_bytes == 0


def test_the_budget_is_spent_in_admission_order() -> None:
    """Two hits of 20 tokens, a budget for one: the first runs in its step, the second waits
    for its load; a third request sharing the first's prefix hits its blocks locally (a
    sync load's blocks are hashed at allocation)."""
    scheduler = offloading_scheduler(num_blocks=17, behaviour=BEHAVIOUR_0_33,
                                     sync_load_budget_bytes=HIT_BYTES)
    for req_id, prompt in (("a", PROMPT), ("a2", OTHER)):
        scheduler.add_request(make_request(req_id, prompt, BLOCK, max_tokens=1))
        run_step(scheduler)
        run_step(scheduler, done=tuple(connector(scheduler).jobs))
    scheduler.add_request(make_request("b", range(100, 164), BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=tuple(connector(scheduler).jobs))
    scheduler.add_request(make_request("c", LONGER, BLOCK, max_tokens=2))
    scheduler.add_request(make_request("d", range(200, 222), BLOCK, max_tokens=2))
    scheduler.add_request(make_request("e", range(10, 32), BLOCK, max_tokens=2))
    output, meta = run_step(scheduler)
    assert output.num_scheduled_tokens == {"c": 4, "e": 2}
    assert scheduler.requests["d"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert [(job.req_id, job.sync) for job in meta.load_jobs.values()] == [
        ("c", True), ("d", False)]
    assert scheduler.step_external_hits == [("c", 20), ("d", 20)]
    assert connector(scheduler).sync_loads.num_bytes == 0


def test_0_32_reads_no_budget() -> None:
    scheduler = sync_scheduler(1 << 30, behaviour=BEHAVIOUR_0_32)
    scheduler.add_request(make_request("c", LONGER, BLOCK, max_tokens=2))
    output, meta = run_step(scheduler)
    assert output.num_scheduled_tokens == {}
    assert not any(job.sync for job in meta.load_jobs.values())


def test_a_reservation_leaves_one_token_to_compute_and_is_never_refunded() -> None:
    loads = SyncLoads(budget_bytes=1000, bytes_per_token=10)
    assert not loads.reserve("a", 0, 20, num_tokens=20)  # nothing left to compute
    assert not loads.reserve("a", 4, 16, num_tokens=20)
    assert not loads.reserve("a", 0, None, num_tokens=20)  # the lookup cannot tell yet
    assert not loads.reserve("a", 0, 0, num_tokens=20)
    assert loads.reserve("a", 0, 19, num_tokens=20)
    assert (loads.requests, loads.num_bytes) == ({"a"}, 190)
    assert not loads.reserve("a", 0, 90, num_tokens=100)  # 190 + 900 > 1000: asynchronous
    assert (loads.requests, loads.num_bytes) == (set(), 190)  # dropped, its bytes spent
    assert loads.reserve("b", 0, 81, num_tokens=100)  # 190 + 810 = 1000: exactly fits
    assert not SyncLoads(0, 10).reserve("a", 0, 1, num_tokens=20)  # no budget
    loads.end_step()
    assert (loads.requests, loads.num_bytes) == (set(), 0)


def test_bytes_per_token_sum_every_group_over_its_block() -> None:
    config = KVCacheConfig(10, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(16)),  # 2 x 64 x 4 bytes a token
        KVCacheGroupSpec(("a", "b"), FullAttentionSpec(16, num_kv_heads=2, dtype="float16")),
        KVCacheGroupSpec(("ssm",), MambaSpec(16, state_bytes=4096))))  # a state over 16
    assert kv_bytes_per_token(config) == 512 + 2 * 512 + 256


def test_under_dcp_a_worker_holds_a_share_of_each_full_attention_block() -> None:
    """DCP 4: the scheduler's 64-token full-attention block is 16 tokens on each rank, so a
    token takes a quarter of its bytes on one worker; a mamba state is replicated."""
    from impl.core.context_parallel import dcp_scheduler_view

    config = dcp_scheduler_view(KVCacheConfig(10, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(16)),
        KVCacheGroupSpec(("ssm",), MambaSpec(16, state_bytes=4096)))), 4)
    assert kv_bytes_per_token(config) == 512 // 4 + 256


def test_settings_refuse_a_negative_budget() -> None:
    with pytest.raises(ValueError, match="sync_load_budget_bytes: must be >= 0"):
        OffloadingSettings(4, sync_load_budget_bytes=-1)


def test_a_sync_load_beside_mamba_overdraws_a_tight_pool_as_0_33_does() -> None:
    """Full attention beside mamba 'align', a pool of 9 blocks: `c`'s 12-token CPU hit loads
    within the step and its 13th token is scheduled in the same allocation. The count allows
    one new mamba state block per call, the call takes two (the hit's state and the new
    token's), the pool runs dry: 0.33 dies there (ValueError), the twin stops on its release
    check (`conformance/upstream_bugs/offloading-sync-load-mamba-undercount-0.33.jsonl`)."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, behaviour=BEHAVIOUR_0_33,
                             kv_connector=OffloadingSettings(32, 1, sync_load_budget_bytes=1 << 20))
    scheduler = Scheduler(config, KVCacheConfig(10, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(BLOCK)),
        KVCacheGroupSpec(("mamba",), MambaSpec(BLOCK, mamba_cache_mode="align")))),
        none_hash=NONE_HASH, log_stats=True)
    scheduler.add_request(make_request("a", range(10, 22), BLOCK, max_tokens=1))
    for _ in range(3):
        run_step(scheduler, done=tuple(connector(scheduler).jobs))
    scheduler.add_request(make_request("filler", range(100, 108), BLOCK, max_tokens=20))
    run_step(scheduler, done=tuple(connector(scheduler).jobs))
    scheduler.add_request(make_request("c", range(10, 23), BLOCK, max_tokens=2))
    # c waits while the filler prefills (its count does not fit beside it), then comes in.
    for scheduled in ({"filler": 4}, {"filler": 1}):
        output, _ = run_step(scheduler, done=tuple(connector(scheduler).jobs))
        assert output.num_scheduled_tokens == scheduled
    with pytest.raises(ReleaseCheckFailed, match=r"'sync-load-blocks-undercounted'.*c's sync "
                                                 r"load of 12 tokens, 1 more scheduled"):
        scheduler.schedule()


def test_reservations_add_up_over_the_step() -> None:
    """A budget for 20 tokens: 8, then 8 more fit (16 spent), a third 8 does not (24)."""
    loads = SyncLoads(budget_bytes=200, bytes_per_token=10)
    assert loads.reserve("a", 0, 8, num_tokens=20)
    assert loads.reserve("b", 0, 8, num_tokens=20)
    assert loads.num_bytes == 160
    assert not loads.reserve("c", 0, 8, num_tokens=20)
    assert loads.requests == {"a", "b"}
