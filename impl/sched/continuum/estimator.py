"""`ToolCallEstimator`: how long will this job's tool call take, and is a pin worth it?

The fork's estimator is tokenizer-backed and learns from wall-clock arrivals; here it learns
from the deterministic clock. The scheduler tells it when a non-final turn finishes
(`request_finished`) and when any request arrives (`request_arrives`); the gap between the
two for one job is that job's observed tool-call time.

| estimator | predicted tool-call time                        | pin time-to-live       |
| --------- | ----------------------------------------------- | ---------------------- |
| fixed     | `ttl_ms`                                        | `ttl_ms`               |
| learned   | the job's longest observed gap, else `ttl_ms`   | prediction + one step  |

The extra step of the learned TTL is what lets a pin survive to its next turn: a turn that
arrives exactly one predicted gap after the finish is admitted in the same step the pin would
expire, and expiry runs first. A prediction at or over `threshold_ms` means no pin (TTL 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.sched.continuum.settings import ContinuumSettings

if TYPE_CHECKING:
    from impl.sched.request import Request


class ToolCallEstimator:
    def __init__(self, settings: ContinuumSettings) -> None:
        self.settings = settings
        self._finished_ms: dict[str, float] = {}  # job -> when its last non-final turn ended
        self._longest_gap_ms: dict[str, float] = {}  # job -> longest tool call seen

    def request_arrives(self, request: Request, now_ms: float) -> None:
        """A turn arrived: if its job was in a tool call, that call took until now."""
        job = request.job_id
        if job is None or job not in self._finished_ms:
            return
        gap = now_ms - self._finished_ms.pop(job)
        self._longest_gap_ms[job] = max(gap, self._longest_gap_ms.get(job, gap))

    def request_finished(self, request: Request, now_ms: float) -> None:
        if request.job_id is not None:
            self._finished_ms[request.job_id] = now_ms

    def predicted_ms(self, request: Request) -> float:
        settings = self.settings
        if settings.estimator == "learned" and request.job_id is not None:
            return self._longest_gap_ms.get(request.job_id, settings.ttl_ms)
        return settings.ttl_ms

    def set_up_pin(self, request: Request) -> float:
        """The pin's time-to-live in ms; 0 when the predicted call is too long to pin for."""
        settings = self.settings
        predicted = self.predicted_ms(request)
        if predicted >= settings.threshold_ms:
            return 0.0
        if settings.estimator == "learned" and request.job_id in self._longest_gap_ms:
            return predicted + settings.step_ms
        return predicted
