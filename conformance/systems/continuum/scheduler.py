"""The Continuum fork's scheduling changes (seed 002), rebuilt on upstream 0.32's `Scheduler`.

Imports vLLM at module level: only `continuum_fork.ContinuumForkSystem` imports this, when a
fork system is built. Upstream's `schedule()` is not copied or overridden in its body; each
change point is reached through the objects that code reads and the methods it calls:

| seed change | here                                                                          |
| ----------- | ----------------------------------------------------------------------------- |
| 2, 3, 4     | `__init__` state; `_pin_request` / `_unpin_request` / `_unpin_expired_requests` |
| 5           | `schedule()` override: sweep and `waiting.update_pinned_state` before upstream  |
| 6, 10       | `schedule()` override: snapshot before, decision after (tracer attached only)  |
| 7           | `running` is a `PinAwareRunning` list: the FCFS branch's `running[-1]` and      |
|             | `running.pop()` give the last unpinned request from the one being scheduled on |
| 8           | `_get_local_prefix_cache_hit` override records the lookup                     |
| 9           | not needed: the victim never sits before the loop position, so upstream's     |
|             | `scheduled <= running` assert holds and stays an assert                       |
| 11          | `add_request` override: the estimator sees the arrival                        |
| 12          | `_free_blocks` override: pin instead of free behind the four gates            |

Time is the deterministic clock of the twin's policy: one step per `schedule()` call, moved
forward to a later arrival's step (`request.arrival_time` is the driver's step). The estimator
is written again here, from the same table as the twin's (`impl.sched.continuum.estimator`),
so that the two are independent implementations of one rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm.v1.core.sched.request_queue import FCFSRequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from impl.sched.tracing.tracer import PrefixCacheEvent, StepDecision, StepSnapshot, Tracer
from workloads.model import ContinuumConfig


class ContinuumQueue(FCFSRequestQueue):  # type: ignore[misc]
    """The fork's waiting queue: FCFS, but the first turn of a job whose pin is live first."""

    def __init__(self) -> None:
        super().__init__()
        self.warm_jobs: frozenset[str] = frozenset()

    def update_pinned_state(self, job_ids: Iterable[str]) -> None:
        self.warm_jobs = frozenset(job_ids)

    def _pick(self) -> int:
        for index, request in enumerate(self):
            if getattr(request, "job_id", None) in self.warm_jobs:
                return index
        return 0

    def peek_request(self) -> Request:
        if not self:
            raise IndexError("peek from an empty queue")
        return self[self._pick()]

    def pop_request(self) -> Request:
        index = self._pick()
        request = self[index]
        del self[index]
        return request


class PinAwareRunning(list[Request]):
    """`Scheduler.running` for the fork. Upstream's running loop reads `running[req_index]`
    (remembered as the cursor); its FCFS preemption reads `running[-1]` and then calls
    `running.pop()`: both answer the last request at or after the cursor whose job holds no
    pin, else the real tail. Every other use is a plain list."""

    def __init__(self, items: Iterable[Request], scheduler: ContinuumForkScheduler) -> None:
        super().__init__(items)
        self.scheduler = scheduler
        self.cursor = 0

    def _victim(self) -> int:
        pinned = self.scheduler.pinned_job_ids()
        for index in range(len(self) - 1, self.cursor - 1, -1):
            if getattr(list.__getitem__(self, index), "job_id", None) not in pinned:
                return index
        return len(self) - 1

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int:
            if key == -1:
                key = self._victim()
            elif key >= 0:
                self.cursor = key
        return list.__getitem__(self, key)

    def pop(self, index: Any = None) -> Request:
        return list.pop(self, self._victim() if index is None else index)


class ContinuumForkScheduler(Scheduler):  # type: ignore[misc]
    """Built as upstream's `Scheduler` plus the keyword `continuum` (its settings)."""

    def __init__(self, *args: Any, continuum: ContinuumConfig, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.continuum = continuum
        self._sched_step_counter = 0  # change 2: the step being scheduled
        self._next_step = 0
        self.pinned_requests: list[tuple[Request, float]] = []  # change 3: (request, unpin ms)
        self.tool_call_estimator = ForkEstimator(continuum)
        self.job_fields: dict[str, tuple[str | None, bool]] = {}  # set by the adapter
        self.sched_trace: Tracer | None = None
        self.waiting = ContinuumQueue()

    # `running` is reassigned by upstream (update_from_output, finish_requests): keep it wrapped.
    @property
    def running(self) -> PinAwareRunning:
        return self._pin_aware_running

    @running.setter
    def running(self, value: list[Request]) -> None:
        self._pin_aware_running = value if isinstance(value, PinAwareRunning) else \
            PinAwareRunning(value, self)

    def now_ms(self) -> float:
        return self._sched_step_counter * self.continuum.step_ms

    def pinned_job_ids(self) -> set[str]:
        return {r.job_id for r, _ in self.pinned_requests if r.job_id}

    # -- change 4 ----------------------------------------------------------------------------
    def _pin_request(self, request: Request, pin_ttl: float) -> None:
        stale = [(r, t) for r, t in self.pinned_requests if r.job_id == request.job_id]
        for r, t in stale:
            self._unpin_request(r, t)
        self.pinned_requests.append((request, self.now_ms() + pin_ttl))

    def _unpin_request(self, request: Request, end_time: float) -> None:
        self.pinned_requests.remove((request, end_time))
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def _unpin_expired_requests(self) -> None:
        now = self.now_ms()
        for request, end_time in [(r, t) for r, t in self.pinned_requests if now >= t]:
            self._unpin_request(request, end_time)

    # -- changes 5, 6, 10 --------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._sched_step_counter = self._next_step
        self._next_step += 1
        self._unpin_expired_requests()
        self.waiting.update_pinned_state(self.pinned_job_ids())
        if self.sched_trace is not None:
            self.sched_trace.add(self._snapshot())
        output = super().schedule(*args, **kwargs)
        if self.sched_trace is not None:
            self.sched_trace.add(self._decision(output))
        return output

    def has_requests(self) -> bool:
        """Not in the seed: an engine with only pins left keeps stepping so they expire on
        time (the seed's pins wait for the next `schedule()`, which an idle engine never
        calls), and a run ends with every block free."""
        return bool(super().has_requests() or self.pinned_requests)

    # -- change 7's reach: the cursor is set by the running loop's own read ------------------
    # -- change 8 ----------------------------------------------------------------------------
    def _get_local_prefix_cache_hit(self, request: Request) -> Any:
        found = super()._get_local_prefix_cache_hit(request)
        if self.sched_trace is not None:
            self.sched_trace.add(PrefixCacheEvent(
                self._sched_step_counter, request.request_id, getattr(request, "job_id", None),
                found[1], 0, request.num_prompt_tokens, request.num_tokens))
        return found

    # -- change 11 ---------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        request.job_id, request.is_last_step = self.job_fields.pop(
            request.request_id, (None, True))
        super().add_request(request)
        arrival = int(request.arrival_time)
        self._next_step = max(self._next_step, arrival)
        self.tool_call_estimator.request_arrives(request, arrival * self.continuum.step_ms)

    # -- change 12 ---------------------------------------------------------------------------
    def _free_blocks(self, request: Request) -> None:
        if not request.is_last_step and request.job_id:
            self.tool_call_estimator.request_finished(request, self.now_ms())
            pin_ttl = self.tool_call_estimator.set_up_pin(request)
            if pin_ttl > 0.0:
                self._pin_request(request, pin_ttl)
                return
        super()._free_blocks(request)

    # -- trace records -----------------------------------------------------------------------
    def _snapshot(self) -> StepSnapshot:
        pool = self.kv_cache_manager.block_pool
        manager = self.kv_cache_manager
        tables = [manager.get_block_ids(r.request_id) for r, _ in self.pinned_requests]
        pinned_blocks = sum(len(ids) for table in tables for ids in table)
        unique = len({(g, b) for table in tables for g, ids in enumerate(table) for b in ids})
        return StepSnapshot(
            self._sched_step_counter, len(self.running),
            len(self.waiting) + len(self.kv_holding_waiting), pool.get_num_free_blocks(),
            pool.num_gpu_blocks, sum(1 for b in pool.blocks if b._block_hash is not None),
            None, None, None, len(self.pinned_requests), pinned_blocks,
            tuple(r.job_id for r, _ in self.pinned_requests if r.job_id),
            self.max_num_running_reqs, self.max_num_scheduled_tokens, unique)

    def _decision(self, output: Any) -> StepDecision:
        cached = output.scheduled_cached_reqs
        resumed = set(cached.resumed_req_ids)
        return StepDecision(
            self._sched_step_counter, tuple(r.req_id for r in output.scheduled_new_reqs),
            tuple(r for r in cached.req_ids if r in resumed),
            tuple(r for r in cached.req_ids if r not in resumed),
            tuple(sorted(output.preempted_req_ids or ())),
            tuple(output.num_scheduled_tokens.items()), output.total_num_scheduled_tokens)


class ForkEstimator:
    """Tool-call time per job: `fixed` predicts `ttl_ms`; `learned` the job's longest seen gap
    (finish to next arrival), else `ttl_ms`, and pins one step past it. No pin (0) when the
    prediction reaches `threshold_ms`."""

    def __init__(self, config: ContinuumConfig) -> None:
        self.config = config
        self.last_finish: dict[str, float] = {}
        self.gaps: dict[str, float] = {}

    def request_arrives(self, request: Request, now_ms: float) -> None:
        job = getattr(request, "job_id", None)
        if job in self.last_finish:
            gap = now_ms - self.last_finish.pop(job)
            self.gaps[job] = max(self.gaps.get(job, gap), gap)

    def request_finished(self, request: Request, now_ms: float) -> None:
        self.last_finish[request.job_id] = now_ms

    def set_up_pin(self, request: Request) -> float:
        config = self.config
        learned = config.estimator == "learned" and request.job_id in self.gaps
        predicted = self.gaps[request.job_id] if learned else config.ttl_ms
        if predicted >= config.threshold_ms:
            return 0.0
        return predicted + config.step_ms if learned else predicted
