"""Workload replay: the bundled Mooncake and Azure subsamples run to completion.

Requests are built (prompts hashed) in `setup`; the timed call adds them at their arrival step
and runs every engine step with a stub model. `track_steps_per_second` reports the same run as
a rate, the unit the issue asks for.
"""

from __future__ import annotations

import time

from .common import SYSTEMS, memo, require, submodule

scenarios = submodule("scenarios")


def _workload(name: str) -> object:
    import workloads

    return memo(("workload", name), lambda: workloads.load(name))


class Replay:
    params = [SYSTEMS, ["mooncake", "azure"]]
    param_names = ["system", "workload"]
    number = 1
    warmup_time = 0.0
    repeat = (2, 5, 60.0)
    rounds = 1
    timeout = 900

    def setup(self, system: str, workload: str) -> None:
        require("impl.sched.scheduler", "workloads")
        self.state = scenarios.Replay(system, _workload(workload))

    def time_replay(self, system: str, workload: str) -> None:
        self.state.run()

    def track_steps_per_second(self, system: str, workload: str) -> float:
        start = time.perf_counter()
        steps, _ = self.state.run()
        return steps / (time.perf_counter() - start)

    track_steps_per_second.unit = "steps/s"  # type: ignore[attr-defined]


class WholeTrace:
    """A whole bundled Mooncake trace as recorded: building its requests (prompt hashing) and
    the replay, timed together as `vtwin bench --trace` does per phase. `mooncake-full` (3,993
    requests, 51k steps) on both systems; `mooncake-conversation` (12,031 requests, 178k steps,
    142M prompt tokens) on the twin only: upstream would add minutes to every commit measured,
    and `vtwin bench --trace mooncake-conversation` runs it on demand."""

    params = [SYSTEMS, ["mooncake-full", "mooncake-conversation"]]
    param_names = ["system", "workload"]
    number = 1
    warmup_time = 0.0
    repeat = (1, 2, 300.0)
    rounds = 1
    timeout = 1800

    def setup(self, system: str, workload: str) -> None:
        require("impl.sched.scheduler", "workloads")
        if workload == "mooncake-conversation" and system != "impl":
            raise NotImplementedError("the conversation trace is measured on the twin only")
        self.trace = submodule("trace")
        self.workload = _workload(workload)
        self.trace.warm_up(system, self.workload)

    def time_build_and_replay(self, system: str, workload: str) -> None:
        self.trace.time_trace(system, self.workload)
