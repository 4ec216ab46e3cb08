"""Builders for the CPU offload tier's unit tests: a scheduler with the tier on, one engine
step with the worker's connector report, and a report of finished stores."""

from __future__ import annotations

from impl.connector.types import KVConnectorOutput, OffloadMetadata, OffloadSettings
from impl.sched.output import ModelRunnerOutput, SchedulerOutput
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_scheduler

BLOCK = 4


def offload_scheduler(num_blocks: int = 16, num_cpu_blocks: int = 32, lazy: bool = False,
                      policy: str = "fail") -> Scheduler:
    return make_scheduler(num_blocks, block_size=BLOCK, max_num_batched_tokens=64,
                          kv_connector=OffloadSettings(num_cpu_blocks, lazy, policy))


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
