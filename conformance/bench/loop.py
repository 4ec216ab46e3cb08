"""`EngineLoop`: one scheduler driven the way an engine core drives it, with a stub model.

A step is what the targets call "schedule + update": `schedule()`, a model-runner output that
samples one token for every request whose input is complete (partial prefill chunks sample
nothing, as on a GPU), then `update_from_output()`. The stub is the same code for both systems,
so it adds the same cost to both sides; `stub_seconds` accumulates it (and `add_seconds` the
`add_request` calls) so a caller can take them out and time exactly schedule + update.
Requests are built outside the timed region where a benchmark says so (`make_request`), since
in a real engine the client side builds them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .systems import DROPIN, SchedSpec, check_scheduler, request_hasher, scheduler

TOKEN = 7
"""The token every stub step samples; requests ignore EOS, so only max_tokens ends them."""


class EngineLoop:
    def __init__(self, system: str, spec: SchedSpec) -> None:
        """`system`: impl, upstream, or dropin (the twin through upstream's interface: upstream's
        requests and runner outputs in, the adapter translating, as in upstream's engine)."""
        check_scheduler(system)
        self.system = system
        self.front = "upstream" if system == DROPIN else system  # whose objects go in
        self.spec = spec
        self.scheduler: Any = scheduler(system, spec)
        # The stub asks the scheduler holding the requests how far each one is (for dropin,
        # the twin inside the adapter), as do the queue lengths.
        self._core: Any = self.scheduler.impl if system == DROPIN else self.scheduler
        self._hasher: Any = request_hasher(self.front, spec.hash_algo, spec.block_size)
        self._runner_output: Callable[[list[str], list[list[int]]], Any]
        if self.front == "impl":
            from impl.sched.output import ModelRunnerOutput

            self._runner_output = lambda ids, sampled: ModelRunnerOutput(
                ids, {r: i for i, r in enumerate(ids)}, sampled)
        else:
            from vllm.v1.outputs import ModelRunnerOutput as UpstreamOutput

            self._runner_output = lambda ids, sampled: UpstreamOutput(
                req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=sampled)
        self.steps = 0
        self.scheduled_tokens = 0
        self.stub_seconds = 0.0
        self.add_seconds = 0.0  # in add(): a drop-in's adapter translates requests there

    # -- requests --------------------------------------------------------------------------
    def make_request(self, request_id: str, prompt: Sequence[int], max_tokens: int,
                     arrival_time: float = 0.0) -> Any:
        """A request as this system's engine core would build it (prompt hashed here)."""
        if self.front == "impl":
            from impl.sched.request import Request

            return Request(request_id, prompt, max_tokens=max_tokens, eos_token_id=2,
                           ignore_eos=True, arrival_time=arrival_time,
                           block_hasher=self._hasher)
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request as UpstreamRequest

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        params.update_from_generation_config({}, 2)
        return UpstreamRequest(request_id, list(prompt), params, None,
                               arrival_time=arrival_time, block_hasher=self._hasher)

    def add(self, request: Any) -> None:
        start = time.perf_counter()
        self.scheduler.add_request(request)
        self.add_seconds += time.perf_counter() - start

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_unfinished_requests())

    @property
    def num_running(self) -> int:
        return len(self._core.running)

    @property
    def num_waiting(self) -> int:
        return len(self._core.waiting)

    # -- one engine step -------------------------------------------------------------------
    def _sampled(self, output: Any) -> tuple[list[str], list[list[int]]]:
        requests = self._core.requests
        ids = list(output.num_scheduled_tokens)
        sampled = [[TOKEN] if (r := requests[i]).num_computed_tokens >= r.num_tokens else []
                   for i in ids]
        return ids, sampled

    def step(self) -> None:
        """schedule -> stub runner -> update_from_output."""
        output = self.scheduler.schedule()
        start = time.perf_counter()
        ids, sampled = self._sampled(output)
        runner_output = self._runner_output(ids, sampled)
        self.stub_seconds += time.perf_counter() - start
        self.scheduler.update_from_output(output, runner_output)
        self.steps += 1
        self.scheduled_tokens += output.total_num_scheduled_tokens

    def run(self, num_steps: int) -> None:
        for _ in range(num_steps):
            self.step()

    def run_until_idle(self, max_steps: int = 1_000_000) -> int:
        start = self.steps
        while self.has_requests():
            if self.steps - start >= max_steps:
                raise RuntimeError(f"{self.system}: still busy after {max_steps} steps")
            self.step()
        return self.steps - start
