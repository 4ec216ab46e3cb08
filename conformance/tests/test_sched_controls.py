"""Operator controls in the driver: applied before their step, recorded with their results,
waited for by liveness, refused in one line by a system that cannot apply them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.sched.driver import Driver
from conformance.systems.optional import apply_control
from conformance.systems.twin import ImplSystem
from vtwin.errors import UserError
from workloads.controls import ControlSpec
from workloads.model import EngineConfig, RequestSpec, Workload

CONFIG = EngineConfig(num_blocks=65, max_num_seqs=4, max_num_batched_tokens=64,
                      max_model_len=256)


def workload(*controls: ControlSpec) -> Workload:
    requests = (RequestSpec("a", 0, tuple(range(100, 140)), 6),
                RequestSpec("b", 1, tuple(range(200, 240)), 6))
    return Workload("controls", "", CONFIG, requests, controls=controls)


def test_a_long_pause_holds_the_run_without_a_stall_and_controls_are_recorded() -> None:
    # Paused for 40 steps, far past the stall patience (16 idle steps): a pending unpause is
    # what the run waits for, like a pending abort.
    w = workload(ControlSpec(2, "reset_prefix_cache"), ControlSpec(2, "pause", mode="all"),
                 ControlSpec(42, "unpause"))
    records = [step.record for step in Driver(ImplSystem(CONFIG), w).steps()]
    assert records[2].controls == (("reset_prefix_cache", False), ("pause", None))
    assert all(r.total_num_scheduled_tokens == 0 for r in records[2:42])
    assert records[42].controls == (("unpause", None),)
    assert records[42].total_num_scheduled_tokens > 0
    assert sum(1 for r in records for o in r.outputs if o.finish_reason) == 2


def test_controls_after_the_last_request_still_run() -> None:
    w = workload(ControlSpec(60, "reset_prefix_cache"))
    records = [step.record for step in Driver(ImplSystem(CONFIG), w).steps()]
    assert records[-1].step == 60 and records[-1].controls == (("reset_prefix_cache", True),)


def test_a_system_without_control_is_refused_in_one_line() -> None:
    class Plain:
        name = "plain"

    with pytest.raises(UserError, match=r"^plain has no control\(\) method: it cannot apply "
                                        r"the workload's 'pause' at step 3$"):
        apply_control(Plain(), ControlSpec(3, "pause", mode="new"))


def test_a_forced_reset_under_async_scheduling_with_a_step_in_flight_is_named() -> None:
    config = replace(CONFIG, async_scheduling=True)
    w = replace(workload(ControlSpec(3, "reset_prefix_cache", preempt_running=True)),
                config=config)
    with pytest.raises(NotImplementedError, match="upstream drops that step's output"):
        for _ in Driver(ImplSystem(config), w).steps():
            pass
