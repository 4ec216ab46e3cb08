"""Drop-in on the fake runner: upstream's scheduler interface stepping a replay with a stub
model, once with upstream's own scheduler and once with the twin plugged in as `scheduler_cls`
(`conformance.runner.scheduler_adapter.ImplSchedulerAdapter`, built with the arguments
upstream's engine core passes).

With no model to run, a step is almost only scheduling: this is the drop-in's cost where the
model is fast (a large GPU), without a GPU. Both sides take upstream's request objects and
runner outputs, so the twin's side pays the adapter's translation both ways, as a
`--scheduler-cls` user would. Steps and scheduled tokens must agree between the two.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass
from typing import Any

from .scenarios import Replay
from .systems import DROPIN

FAKE_RUNNER_WORKLOAD = "mooncake"
"""The bundled subsample `--dropin` replays on the fake runner (the quick pass's replay)."""


@dataclass(frozen=True, slots=True)
class FakeRunnerTiming:
    scheduler: str  # "upstream": its own; "impl": the twin through the adapter
    workload: str
    steps: int
    scheduled_tokens: int
    sched_ms_per_step: float  # schedule + update_from_output
    step_ms: float  # the whole replay step: arrivals added, schedule, stub runner, update

    @property
    def sched_share(self) -> float:
        """Percent of a fake-runner step spent in schedule + update_from_output."""
        return 100 * self.sched_ms_per_step / self.step_ms

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "sched_share_percent": self.sched_share, "runner": "fake"}

    def line(self) -> str:
        return (f"{self.scheduler:<9} upstream's interface, fake runner, {self.workload}: "
                f"{self.steps:,} steps, step {self.step_ms:.4f} ms, schedule + update "
                f"{self.sched_ms_per_step:.4f} ms/step ({self.sched_share:.1f}% of the step)")


def time_fake_runner(scheduler: str, workload: Any) -> FakeRunnerTiming:
    """Replay `workload` to completion (requests built before the clock, GC off) with
    upstream's scheduler ("upstream") or the twin behind upstream's interface ("impl")."""
    if scheduler not in ("impl", "upstream"):
        raise ValueError(f"unknown scheduler {scheduler!r} (known: impl, upstream)")
    replay = Replay(DROPIN if scheduler == "impl" else "upstream", workload)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        steps, tokens = replay.run()
        elapsed = time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    loop = replay.loop
    sched = elapsed - loop.stub_seconds - loop.add_seconds
    per_step = 1e3 / max(1, steps)
    return FakeRunnerTiming(scheduler, workload.name, steps, tokens, sched * per_step,
                            elapsed * per_step)


def time_fake_runners(workload: Any) -> list[FakeRunnerTiming]:
    """Upstream's scheduler, then the twin's; raises if they took different steps or tokens."""
    upstream, impl = (time_fake_runner(s, workload) for s in ("upstream", "impl"))
    if (upstream.steps, upstream.scheduled_tokens) != (impl.steps, impl.scheduled_tokens):
        raise AssertionError(
            f"fake runner {workload.name}: the twin took (steps, tokens) "
            f"{(impl.steps, impl.scheduled_tokens)}, upstream's scheduler "
            f"{(upstream.steps, upstream.scheduled_tokens)}")
    return [upstream, impl]
