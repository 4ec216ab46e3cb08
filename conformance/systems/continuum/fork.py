"""`continuum-fork`: the Continuum fork (seed 002) as a `System`, the worked example of a fork
under test.

The fork's scheduler (`continuum_fork_scheduler.ContinuumForkScheduler`, upstream 0.32's
`Scheduler` with the seed's change points reached through its objects) runs behind the 0.32
adapter, so everything the harness reads is read exactly as for upstream. Under a workload's
policy `fcfs` or `priority` the adapter builds upstream's own scheduler class, untouched: the
fork is upstream when the policy is off, which `vtwin conform --system continuum-fork
--against upstream` shows on any workload. Under `continuum` upstream is configured as FCFS
(its scheduler has no such policy) and the subclass adds pinning.

```
vtwin conform --system impl --against continuum-fork --workload agentic
```
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from conformance.systems.protocol import SystemState
from conformance.systems.upstream.system import UpstreamSystem
from vtwin.errors import UserError
from workloads.model import ContinuumConfig, EngineConfig, RequestSpec


class ContinuumForkSystem(UpstreamSystem):
    name = "continuum-fork"

    def __init__(self, config: EngineConfig) -> None:
        self.continuum: ContinuumConfig | None = None
        if config.policy == "continuum":
            if config.async_scheduling:
                raise UserError("continuum-fork: the continuum policy is rebuilt on the "
                                "synchronous Scheduler only (async_scheduling is on)")
            self.continuum = config.continuum or ContinuumConfig()
            config = dataclasses.replace(config, policy="fcfs")
        super().__init__(config)
        self.name = "continuum-fork" if self.continuum is not None else \
            f"continuum-fork({self.name}, policy {config.policy})"

    def scheduler_class(self, plugged: str | None) -> Any:
        if self.continuum is None:
            return super().scheduler_class(plugged)
        from conformance.systems.continuum.scheduler import ContinuumForkScheduler

        return functools.partial(ContinuumForkScheduler, continuum=self.continuum)

    def add_request(self, request: RequestSpec, arrival_time: float) -> None:
        if self.continuum is not None:  # the fork's Request carries the job's fields
            self.scheduler.job_fields[request.request_id] = (request.job_id,
                                                             request.is_last_step)
        super().add_request(request, arrival_time)

    def state(self) -> SystemState:
        state = super().state()
        if self.continuum is None:
            return state
        return dataclasses.replace(state, pinned=tuple(
            r.request_id for r, _ in self.scheduler.pinned_requests))

    def attach_tracer(self, tracer: Any) -> None:
        """Record seed 002's trace into `tracer` (continuum only; off until attached)."""
        if self.continuum is not None:
            self.scheduler.sched_trace = tracer
