"""Which running request gives its blocks up when an allocation fails, and how it does.

FCFS preempts the last admitted; priority the least important (highest value, then latest
arrival), wherever it sits in `running`; continuum the last one whose job holds no pin. A
preempted request frees its blocks (or, with deferred frees, hands them to the step fence),
forgets its computed tokens and goes back to the front of `waiting`.
"""

from __future__ import annotations

from mypy_extensions import trait

from impl.sched.connector_paths import ConnectorPaths
from impl.sched.request import Request, RequestStatus


@trait
class Preemption(ConnectorPaths):
    """Preemption frees through the connector paths (`_free_request_blocks` holds a
    victim's blocks back while a step in flight still writes them), hence the base."""

    def _victim_index(self, index: int) -> int:
        """Where in `running` the request to preempt sits. FCFS: the last admitted. Priority:
        the least important (highest value, then latest arrival), wherever it is: possibly
        before the request being scheduled, scheduled already, or skipped this step.
        Continuum: the last from `index` on whose job holds no pin (`ContinuumPolicy`)."""
        running = self.running
        if self.continuum is not None:
            return self.continuum.victim_index(running, index)
        if self.policy == "priority":
            return max(range(len(running)),
                       key=lambda i: (running[i].priority, running[i].arrival_time))
        return len(running) - 1

    def _preempt_request(self, request: Request) -> None:
        assert request.status == RequestStatus.RUNNING
        self._free_request_blocks(request)
        self.encoder_cache.free(request)
        self.inflight_prefills.pop(request.request_id, None)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend_request(request)
