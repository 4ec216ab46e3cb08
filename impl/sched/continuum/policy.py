"""`ContinuumPolicy`: the scheduler's extension points for KV pinning (seed 002).

| hook (the scheduler calls it)  | seed | what it does                                      |
| ------------------------------ | ---- | ------------------------------------------------- |
| `request_arrives` (add)        | 11   | advance the clock to the arrival; teach estimator |
| `start_step` (top of schedule) | 5    | tick, release expired pins, refresh warm jobs     |
| `victim_index` (preemption)    | 7    | last running request of an unpinned job           |
| `on_finish` (free path)        | 12   | pin a non-final turn instead of freeing it        |

The clock is engine steps: each `schedule()` call is one step, and an arrival stamped with a
later step moves the clock there (the engine idles, without scheduling, while nothing is in
it). A pin made while step S's output is applied expires at S * step_ms + TTL and is released
at the top of the first step whose time has reached that, before any allocation.

A pinned request is finished, in no queue, still in the scheduler's `requests` and still
holding its blocks; one job holds at most one pin (a newer turn's pin releases the older).

The victim rule differs from the seed in one case, for the same reason as the rebuilt fork
(`conformance/systems/continuum/fork.py`): candidates are the running requests from the one
being scheduled onwards. The seed takes the last unpinned request anywhere in `running`, which
can be one this step already scheduled; it then stays in the step's output while preempted
(the over-count the fork's change 9 turns from an assert into a warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from impl.core.kv_cache_manager import KVCacheManager
from impl.sched.continuum.estimator import ToolCallEstimator
from impl.sched.continuum.queue import ContinuumRequestQueue
from impl.sched.continuum.settings import ContinuumSettings
from impl.sched.request import Request


@dataclass(frozen=True, slots=True)
class Pin:
    request: Request
    expires_ms: float


class ContinuumPolicy:
    def __init__(self, settings: ContinuumSettings, kv_cache_manager: KVCacheManager,
                 requests: dict[str, Request]) -> None:
        self.settings = settings
        self.kv_cache_manager = kv_cache_manager
        self.requests = requests  # the scheduler's own map: a pin is released from it
        self.estimator = ToolCallEstimator(settings)
        self.pins: list[Pin] = []
        self.now_step = 0
        self._next_step = 0

    @property
    def now_ms(self) -> float:
        return self.now_step * self.settings.step_ms

    def pinned_jobs(self) -> frozenset[str]:
        return frozenset(p.request.job_id for p in self.pins if p.request.job_id)

    def pinned_blocks(self) -> int:
        """Blocks held by pins (a block two pins share counts twice, as in the seed)."""
        manager = self.kv_cache_manager
        return sum(len(ids) for p in self.pins
                   for ids in manager.get_block_ids(p.request.request_id))

    def pinned_unique_blocks(self) -> int:
        manager = self.kv_cache_manager
        return len({(group, block) for p in self.pins for group, ids in
                    enumerate(manager.get_block_ids(p.request.request_id)) for block in ids})

    def request_arrives(self, request: Request) -> None:
        arrival = int(request.arrival_time)
        self._next_step = max(self._next_step, arrival)
        self.estimator.request_arrives(request, arrival * self.settings.step_ms)

    def start_step(self, waiting: ContinuumRequestQueue) -> None:
        self.now_step = self._next_step
        self._next_step += 1
        now = self.now_ms
        for pin in [p for p in self.pins if now >= p.expires_ms]:
            self._unpin(pin)
        waiting.warm_jobs = self.pinned_jobs()

    def victim_index(self, running: Sequence[Request], start: int) -> int:
        """From the end back to `start`, the first request whose job holds no pin; else the
        last one (upstream's FCFS victim)."""
        jobs = self.pinned_jobs()
        for index in range(len(running) - 1, start - 1, -1):
            if running[index].job_id not in jobs:
                return index
        return len(running) - 1

    def on_finish(self, request: Request) -> bool:
        """Pin `request` (True) or leave it to the ordinary free path (False)."""
        if request.is_last_step or not request.job_id:
            return False
        estimator = self.estimator
        estimator.request_finished(request, self.now_ms)
        ttl = estimator.set_up_pin(request)
        if ttl <= 0.0:
            return False
        for stale in [p for p in self.pins if p.request.job_id == request.job_id]:
            self._unpin(stale)
        self.pins.append(Pin(request, self.now_ms + ttl))
        return True

    def _unpin(self, pin: Pin) -> None:
        self.pins.remove(pin)
        self.kv_cache_manager.free(pin.request)
        del self.requests[pin.request.request_id]

