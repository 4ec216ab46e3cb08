"""`run_conform` starts every system before the first workload, times that apart (so the first
workload's time is its own: a worker's or vLLM's import is not charged to it), and closes the
factories it built when the run ends (in a `finally`)."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from conformance.sched.conform import run_conform
from conformance.systems.twin import ImplSystem

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "sjf-demo.jsonl")
SPEC = "conformance.tests.test_conform_startup:SLOW_START"
START_SECONDS = 0.5


class SlowStart:
    """A factory whose first build takes START_SECONDS (as importing vLLM would)."""

    def __init__(self) -> None:
        self.builds = 0
        self.closed = 0

    def __call__(self, config: Any) -> ImplSystem:
        self.builds += 1
        if self.builds == 1:
            time.sleep(START_SECONDS)
        return ImplSystem(config)

    def close(self) -> None:
        self.closed += 1


SLOW_START = SlowStart()


def test_start_up_is_its_own_line_and_factories_are_closed() -> None:
    out = io.StringIO()
    run = run_conform([DEMO, DEMO], system=SPEC, against="impl", stream=out)
    assert run.ok and SLOW_START.closed == 1 and SLOW_START.builds == 3  # start-up + 2
    assert run.startup_seconds >= START_SECONDS
    assert all(o.result.seconds < START_SECONDS for o in run.outcomes)
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"vtwin conform: start-up of {SPEC}: ready in ")
               for line in lines), lines
