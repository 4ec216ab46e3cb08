"""A whole trace replayed once per system: building its requests (prompt hashing) and the
replay itself, timed apart (`vtwin bench --trace WORKLOAD`).

The quick pass replays the bundled subsamples over several interleaved rounds; a full trace
(thousands of requests, 10^5 steps) takes tens of seconds per system, so it runs once per
system, in the order given, and reports both phases: what replaying a production trace to try
a scheduler config costs end to end. Step and token counts must agree between systems (the
same check the quick pass makes), else the timings would compare different work.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .loop import EngineLoop
from .scenarios import Replay
from .systems import SchedSpec


@dataclass(frozen=True, slots=True)
class TraceTiming:
    system: str
    workload: str
    requests: int
    build_seconds: float
    replay_seconds: float
    steps: int
    scheduled_tokens: int

    @property
    def total_seconds(self) -> float:
        return self.build_seconds + self.replay_seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_seconds": self.total_seconds}

    def line(self) -> str:
        return (f"{self.system:<9} {self.workload}: {self.requests:,} requests, "
                f"build {self.build_seconds:.2f} s + replay {self.replay_seconds:.2f} s = "
                f"{self.total_seconds:.2f} s ({self.steps:,} steps, "
                f"{self.steps / self.replay_seconds:,.0f} steps/s)")


def warm_up(system: str, workload: Any) -> None:
    """Import the system and build one request outside the clock: upstream's first import
    (seconds) is not the cost of building a trace's requests."""
    loop = EngineLoop(system, SchedSpec.from_engine_config(workload.config))
    loop.make_request("warm-up", [3] * 64, 1)


def time_trace(system: str, workload: Any) -> TraceTiming:
    """Build and replay with the cyclic garbage collector off, as the quick pass times (and as
    `timeit` and asv do): a 12k-request trace holds ~10^8 token ids in lists, and each full
    collection walks all of them, which measured 40% of the twin's build (18.4 s with it, 13.1
    s without) and says nothing about either scheduler."""
    warm_up(system, workload)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        state = Replay(system, workload)
        built = time.perf_counter()
        steps, tokens = state.run()
        done = time.perf_counter()
    finally:
        if enabled:
            gc.enable()
    return TraceTiming(system, workload.name, len(workload.requests), built - start,
                       done - built, steps, tokens)


def time_traces(workload: Any, systems: Sequence[str]) -> list[TraceTiming]:
    """One timing per system; raises if the systems took different steps or tokens."""
    timings = []
    for system in systems:
        timings.append(time_trace(system, workload))
        first, last = timings[0], timings[-1]
        if (first.steps, first.scheduled_tokens) != (last.steps, last.scheduled_tokens):
            raise AssertionError(
                f"trace {workload.name}: {last.system} took (steps, tokens) "
                f"{(last.steps, last.scheduled_tokens)}, {first.system} "
                f"{(first.steps, first.scheduled_tokens)}")
    return timings
