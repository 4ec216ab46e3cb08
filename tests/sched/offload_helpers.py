"""Builders for the CPU offload tier's unit tests: a scheduler with the tier on, one engine
step with the worker's connector report, and a report of finished stores."""

from __future__ import annotations

from impl.connector.types import KVConnectorOutput, OffloadMetadata, OffloadSettings
from impl.sched.output import ModelRunnerOutput, SchedulerOutput
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler

BLOCK = 4


def offload_scheduler(num_blocks: int = 16, num_cpu_blocks: int = 32, lazy: bool = False,
                      policy: str = "fail", **settings: object) -> Scheduler:
    return make_scheduler(num_blocks, block_size=BLOCK, max_num_batched_tokens=64,
                          kv_connector=OffloadSettings(num_cpu_blocks, lazy, policy, **settings))


def run_step(scheduler: Scheduler, report: KVConnectorOutput | None = None,
             ) -> tuple[SchedulerOutput, OffloadMetadata]:
    """One step: schedule, sample a token for every request whose input is complete, apply the
    worker's connector report, check both pools."""
    output = scheduler.schedule()
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[7] if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens
               else [] for r in req_ids]
    scheduler.update_from_output(output, ModelRunnerOutput(
        req_ids, {r: i for i, r in enumerate(req_ids)}, sampled, kv_connector_output=report))
    scheduler.check_integrity()
    assert output.kv_connector_metadata is not None
    return output, output.kv_connector_metadata


def stores_done(*events: int) -> KVConnectorOutput:
    return KVConnectorOutput(completed_store_events=tuple((e, 1) for e in events))


def evict_prefix_then_resend(scheduler: Scheduler) -> None:
    """`a` runs and is stored to the CPU; `b` (another prompt) fills the GPU so `a`'s cached
    blocks are evicted (and is stored too, which pins its blocks until the store reports);
    `c` resends `a`'s prompt."""
    scheduler.add_request(make_request("a", range(10, 23), BLOCK, max_tokens=2))
    run_step(scheduler)
    run_step(scheduler, None)
    run_step(scheduler, stores_done(0))
    assert "a" not in scheduler.requests
    scheduler.add_request(make_request("b", range(100, 160), BLOCK, max_tokens=1))
    run_step(scheduler)
    _, meta = run_step(scheduler)
    assert meta.store_event == 1 and len(meta.store_gpu_blocks) == 15
    run_step(scheduler, stores_done(1))
    gpu = scheduler.kv_cache_manager.block_pool
    assert not any(gpu.get_cached_block(h, [0]) for h in make_request("x", range(10, 23),
                                                                       BLOCK).block_hashes)
    scheduler.add_request(make_request("c", range(10, 23), BLOCK, max_tokens=2))
