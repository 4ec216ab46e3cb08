"""The OffloadingConnector's scheduler side (`impl.connector.offloading.scheduler`) inside the
scheduler, step by step, with exact block ids, chunk slots and job ids: stores of prompt
chunks, loads after GPU eviction, a second request waiting for chunks another one loads,
flushes of a finished request's store when its blocks are handed out again, a reset that
ignores the old jobs' reports, and the integrity check over the jobs' bookkeeping."""

from __future__ import annotations

import pytest

from impl.behaviour import BEHAVIOUR_0_32, Behaviour
from impl.connector.offloading.jobs import OffloadingMetadata
from impl.connector.offloading.scheduler import OffloadingConnectorScheduler
from impl.connector.types import KVConnectorOutput, OffloadingSettings
from impl.sched.output import ModelRunnerOutput, SchedulerOutput
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from vtwin.errors import IntegrityError

BLOCK = 4


def offloading_scheduler(num_blocks: int = 16, num_cpu_chunks: int = 32,
                         blocks_per_chunk: int = 1, behaviour: Behaviour = BEHAVIOUR_0_32,
                         **settings: object) -> Scheduler:
    return make_scheduler(num_blocks, block_size=BLOCK, max_num_batched_tokens=64,
                          behaviour=behaviour,
                          kv_connector=OffloadingSettings(num_cpu_chunks, blocks_per_chunk,
                                                          **settings))  # type: ignore[arg-type]


def connector(scheduler: Scheduler) -> OffloadingConnectorScheduler:
    assert isinstance(scheduler.connector, OffloadingConnectorScheduler)
    return scheduler.connector


def run_step(scheduler: Scheduler, done: tuple[int, ...] = (), loaded: tuple[str, ...] = (),
             ) -> tuple[SchedulerOutput, OffloadingMetadata]:
    """One step with the worker reporting jobs `done` and requests `loaded`; samples a token
    for every request whose input is complete, then checks the scheduler and connector."""
    output = scheduler.schedule()
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[7] if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens
               else [] for r in req_ids]
    report = KVConnectorOutput(finished_recving=frozenset(loaded),
                               completed_jobs=tuple((j, 1) for j in done))
    scheduler.update_from_output(output, ModelRunnerOutput(
        req_ids, {r: i for i, r in enumerate(req_ids)}, sampled, kv_connector_output=report))
    scheduler.check_integrity()
    meta = output.kv_connector_metadata
    assert isinstance(meta, OffloadingMetadata)
    return output, meta


def test_prompt_chunks_are_stored_with_the_step_that_computes_them() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))  # 13 tokens
    _, meta = run_step(scheduler)
    (job_id, job), = meta.store_jobs.items()
    assert (job_id, job.req_id, job.gpu.block_ids, job.gpu.group_sizes, job.cpu_slots) == (
        0, "a", (1, 2, 3), (3,), (0, 1, 2))
    assert connector(scheduler).cpu_counts() == (3, 0, 29)  # being written: not readable
    _, meta = run_step(scheduler, done=(0,))
    assert not meta.store_jobs  # decode tokens are never offered (prompt only)
    assert connector(scheduler).cpu_counts() == (0, 3, 29)


def test_decode_chunks_are_stored_when_not_prompt_only() -> None:
    scheduler = offloading_scheduler(offload_prompt_only=False)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=8))
    run_step(scheduler)
    stored = [meta.store_jobs for _, meta in (run_step(scheduler) for _ in range(4))]
    assert [[job.gpu.block_ids for job in jobs.values()] for jobs in stored] == [
        [], [], [(4,)], []]  # token 16 is computed by the fourth decode step


def test_two_blocks_per_chunk_store_whole_chunks_only() -> None:
    scheduler = offloading_scheduler(blocks_per_chunk=2)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    _, meta = run_step(scheduler)
    (job,) = meta.store_jobs.values()
    assert (job.gpu.block_ids, job.cpu_slots) == ((1, 2), (0,))  # blocks 3 and 4: half a chunk


def _evict_prefix_then_resend(scheduler: Scheduler, *resent: str) -> None:
    """`a` runs and is stored; `b` (another prompt) fills the GPU so `a`'s cached blocks are
    evicted; then each of `resent` sends `a`'s prompt again."""
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(0,))
    scheduler.add_request(make_request("b", range(100, 160), BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(1,))
    assert not connector(scheduler).jobs
    for req_id in resent:
        scheduler.add_request(make_request(req_id, range(10, 23), BLOCK, max_tokens=2))


def test_a_prefix_evicted_from_the_gpu_loads_from_the_cpu_before_scheduling() -> None:
    scheduler = offloading_scheduler()
    _evict_prefix_then_resend(scheduler, "c")
    output, meta = run_step(scheduler)
    assert "c" not in output.num_scheduled_tokens
    assert scheduler.step_external_hits == [("c", 12)]
    assert scheduler.requests["c"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    (job_id, job), = meta.load_jobs.items()
    assert (job_id, job.cpu_slots, job.gpu.group_sizes, job.gpu.block_indices) == (
        2, (0, 1, 2), (3,), (0,))
    assert list(job.gpu.block_ids) == scheduler.kv_cache_manager.get_block_ids("c")[0]
    assert connector(scheduler).cpu_counts()[0] == 3  # the load pins its chunks
    run_step(scheduler, done=(2,), loaded=("c",))
    output, meta = run_step(scheduler)
    assert output.num_scheduled_tokens["c"] == 1  # only the last prompt token is computed
    assert output.scheduled_new_reqs[0].num_computed_tokens == 12
    assert not meta.store_jobs  # the loaded chunks are not offered again


def test_a_request_hitting_chunks_another_one_loads_waits_for_that_load() -> None:
    scheduler = offloading_scheduler()
    _evict_prefix_then_resend(scheduler, "c", "d")
    output, meta = run_step(scheduler)
    assert list(meta.load_jobs) == [2] and meta.load_jobs[2].req_id == "c"
    assert "d" in scheduler.deferred_waiting and scheduler.requests["d"].num_computed_tokens == 0
    run_step(scheduler, done=(2,), loaded=("c",))  # d's lookup is still deferred this step
    output, _ = run_step(scheduler)
    assert output.num_scheduled_tokens == {"c": 1, "d": 1}  # d hits c's blocks on the GPU


def test_a_finished_requests_store_is_flushed_when_its_blocks_are_handed_out_again() -> None:
    scheduler = offloading_scheduler(num_blocks=5)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler)  # store job 0 reads blocks 1-3; `a` finishes in flight
    assert list(meta.store_jobs) == [0]
    assert connector(scheduler).watched_blocks == {1: {0}, 2: {0}, 3: {0}}
    scheduler.add_request(make_request("b", range(100, 108), BLOCK, max_tokens=3))
    _, meta = run_step(scheduler)  # b takes blocks 4 and 3 from the free queue
    assert scheduler.kv_cache_manager.get_block_ids("b") == ([4, 3],)
    assert meta.jobs_to_flush == {0}
    run_step(scheduler, done=(0,))
    assert connector(scheduler).watched_blocks == {}
    assert "a" not in connector(scheduler).requests


def test_a_reset_flushes_jobs_and_ignores_their_late_reports() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=4))
    run_step(scheduler)
    offloading = connector(scheduler)
    offloading.reset_cache()
    assert offloading.batch_flush == {0} and not offloading.jobs
    assert offloading.cpu_counts() == (0, 0, 32)
    _, meta = run_step(scheduler, done=(0,))  # job 0's report comes after the reset
    assert meta.jobs_to_flush == {0}
    assert [job.gpu.block_ids for job in meta.store_jobs.values()] == [(1, 2, 3)]  # re-offered
    assert list(meta.store_jobs) == [1]


def test_an_operator_reset_of_the_connector_resets_it_even_when_the_prefix_reset_fails(
        ) -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=4))
    run_step(scheduler)
    assert not scheduler.reset_prefix_cache()  # blocks in use: refused, connector untouched
    assert connector(scheduler).jobs
    assert not scheduler.reset_prefix_cache(reset_connector=True)  # still refused...
    assert not connector(scheduler).jobs  # ...but the connector forgot its jobs
    assert connector(scheduler).cpu_counts() == (0, 0, 32)


def test_integrity_catches_a_job_its_request_does_not_list() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    connector(scheduler).requests["a"].jobs.clear()
    with pytest.raises(IntegrityError, match="in flight without a request"):
        scheduler.check_integrity()


def test_integrity_catches_a_watched_block_of_a_job_not_in_flight() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    connector(scheduler).watched_blocks[9] = {5}
    with pytest.raises(IntegrityError, match="block 9 is watched"):
        scheduler.check_integrity()


def test_unsupported_groups_and_settings_are_refused_by_field() -> None:
    from impl.core.specs import KVCacheConfig, KVCacheGroupSpec, MambaSpec
    from impl.sched.config import SchedulerConfig

    config = SchedulerConfig(8, 64, 256, block_size=BLOCK,
                             kv_connector=OffloadingSettings(8))
    with_mamba = KVCacheConfig(16, (KVCacheGroupSpec(("m",), MambaSpec(block_size=BLOCK)),))
    with pytest.raises(ValueError, match="a mamba group \\(group 0\\) is not implemented"):
        Scheduler(config, with_mamba, none_hash=b"x", log_stats=False)
    with pytest.raises(ValueError, match="eviction_policy"):
        OffloadingSettings(8, eviction_policy="fifo")


@pytest.mark.parametrize(("release", "cursor"), [("0.32.0", 3), ("0.33.0", 0)])
def test_a_lookup_moves_the_store_cursor_back_in_033_only(release: str, cursor: int) -> None:
    """`offloading_lookup_restarts_stores`: a request looked up again (here: asked while its
    store is in flight, as after a preemption) offers every chunk again under 0.33."""
    from impl.behaviour import behaviour_for

    scheduler = offloading_scheduler(behaviour=behaviour_for(release))
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    run_step(scheduler)
    state = connector(scheduler).requests["a"]
    assert state.groups[0].next_stored_chunk == 3
    matched = connector(scheduler).get_num_new_matched_tokens(scheduler.requests["a"], 0)
    assert matched == (None, False)  # its store is still in flight: ask again later
    assert state.groups[0].next_stored_chunk == cursor


def test_a_store_refused_for_room_is_offered_again_until_it_fits() -> None:
    """Two CPU chunks, both being written for `a`: `b`'s chunk cannot evict either, so the
    manager refuses the offer whole; `b` offers it again every step, and once `a`'s store is
    done (its chunks idle) the offer evicts `a`'s least recent chunk and is stored."""
    scheduler = offloading_scheduler(num_cpu_chunks=2)
    scheduler.add_request(make_request("a", range(10, 19), BLOCK, max_tokens=5))  # 2 chunks
    scheduler.add_request(make_request("b", range(50, 55), BLOCK, max_tokens=5))  # 1 chunk
    _, meta = run_step(scheduler)
    assert [(job.req_id, job.cpu_slots) for job in meta.store_jobs.values()] == [("a", (0, 1))]
    _, meta = run_step(scheduler, done=(0,))  # refused again: a's chunks are still writing
    assert not meta.store_jobs
    _, meta = run_step(scheduler)
    assert [(job.req_id, job.gpu.block_ids, job.cpu_slots)
            for job in meta.store_jobs.values()] == [("b", (4,), (0,))]


def test_a_preempted_requests_stores_in_flight_are_flushed_in_that_step() -> None:
    """Four GPU blocks: `a` and `b` prefill two blocks each and store them (jobs 0 and 1, not
    reported yet); `a`'s first decode needs a third block, so `b` is preempted and its store
    is flushed with the step (its blocks go back to the pool)."""
    scheduler = offloading_scheduler(num_blocks=5)
    scheduler.add_request(make_request("a", range(10, 18), BLOCK, max_tokens=10))
    scheduler.add_request(make_request("b", range(50, 58), BLOCK, max_tokens=10))
    _, meta = run_step(scheduler)
    assert [job.req_id for job in meta.store_jobs.values()] == ["a", "b"]
    output, meta = run_step(scheduler)
    assert output.preempted_req_ids == {"b"}
    assert meta.jobs_to_flush == {1}


def test_a_finished_request_never_stores_the_chunk_its_last_token_ends() -> None:
    """Decode chunks offloaded too: 13 prompt + 3 sampled tokens end a chunk at token 16,
    but the last sampled token's KV is never computed, so that chunk is not stored."""
    scheduler = offloading_scheduler(offload_prompt_only=False)
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=3))
    stored = [job.gpu.block_ids for _ in range(5)
              for job in run_step(scheduler)[1].store_jobs.values()]
    assert "a" not in scheduler.requests
    assert stored == [(1, 2, 3)]


def test_the_manager_is_walked_every_64th_check_and_its_counters_checked_between() -> None:
    """A corrupted catalogue entry is caught by the next full walk (the first check, then
    every 64th); a miscounted idle total by the next check of any kind."""
    scheduler = offloading_scheduler()
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=30))
    run_step(scheduler, done=())  # check 0: a full walk
    manager = connector(scheduler).manager
    chunk = next(manager.policy.get(key) for key in manager.policy.cached_keys())
    assert chunk is not None
    chunk.ref_cnt = 5  # wrong, but only a walk looks at a chunk
    for _ in range(63):
        scheduler.check_integrity()  # checks 1-63: counters only
    with pytest.raises(IntegrityError, match="writes counted"):
        scheduler.check_integrity()  # check 64 walks
    manager.num_idle = manager.slots.capacity + 1
    with pytest.raises(IntegrityError, match="idle and"):
        connector(scheduler).check_integrity()


@pytest.mark.parametrize(("release", "waits"), [("0.32.0", False), ("0.33.0", True)])
def test_a_reset_waits_for_its_flushed_jobs_reports_in_033_only(release: str,
                                                                 waits: bool) -> None:
    """`offloading_reset_fence`: `a` finishes with its store (job 0) in flight; a reset of the
    connector's cache flushes the job. 0.33 keeps stepping (an empty step) until the worker
    reports it; 0.32 forgets it and the engine is idle at once."""
    from impl.behaviour import behaviour_for

    scheduler = offloading_scheduler(behaviour=behaviour_for(release))
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=1))
    _, meta = run_step(scheduler)
    assert list(meta.store_jobs) == [0] and "a" not in scheduler.requests
    run_step(scheduler)  # reports `a` finished; its store is still in flight
    assert scheduler.has_requests()
    assert scheduler.reset_connector_cache()
    assert connector(scheduler).reset_fence == ({0: 1} if waits else {})
    assert scheduler.has_requests() is waits
    _, meta = run_step(scheduler, done=(0,))  # the flush goes out; the late report comes in
    assert meta.jobs_to_flush == {0}
    assert connector(scheduler).reset_fence == {}
    assert not scheduler.has_requests()
