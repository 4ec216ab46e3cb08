"""Both systems stopping at the same step on the same release check is agreement
(`conformance.sched.failures`); one side alone, another step or another check stays an error.

No vLLM needed: the right side is the twin again, wrapped so that where the twin raises
`ReleaseCheckFailed('lora-limit')` it raises upstream's bare assertion instead (the assertion's
source line, in `_upstream_asserts` below, is what identifies it in a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.campaign.task import SAME_FAILURE, classify, compare_runs, record_run
from conformance.sched import failures
from conformance.sched.conform import judge
from conformance.sched.driver import Driver
from conformance.sched.lockstep import run_lockstep
from conformance.sched.recorded import Recorded, compare_recorded
from conformance.systems.protocol import Scheduled, System
from conformance.systems.remote.proxy import remote_error
from conformance.systems.twin import ImplSystem
from vtwin.errors import IntegrityError, ReleaseCheckFailed
from workloads import load
from workloads.model import EngineConfig, Workload

BUGS = Path(__file__).resolve().parents[1] / "upstream_bugs"
CHECKED = "len(scheduled_loras) <= self.lora_config.max_loras"


def _upstream_asserts(scheduled_loras: set[int], self: Any) -> None:
    assert len(scheduled_loras) <= self.lora_config.max_loras


class _Limits:
    class lora_config:  # noqa: N801 - reads like upstream's attribute chain
        max_loras = 1


class AssertingTwin(ImplSystem):
    """The twin, failing the way upstream 0.32 does (a bare AssertionError), another way
    (`other`), or at a step of its own (`fail_at`, 1-based)."""

    def __init__(self, config: EngineConfig, *, other: bool = False,
                 fail_at: int | None = None) -> None:
        super().__init__(config)
        self.other, self.fail_at, self.steps = other, fail_at, 0

    def schedule(self) -> Scheduled:
        self.steps += 1
        if self.steps == self.fail_at:
            _upstream_asserts({1, 2}, _Limits())
        try:
            return super().schedule()
        except ReleaseCheckFailed:
            assert not self.other, "some other assertion"
            _upstream_asserts({1, 2}, _Limits())
            raise


def _workload(name: str = "lora-limit-assert-032") -> Workload:
    return load(str(BUGS / f"{name}.jsonl"))


@pytest.mark.parametrize("name, step", [("lora-limit-assert-032", 24),
                                        ("lora-limit-assert-032-async", 28)])
def test_the_twin_alone_stops_where_upstream_032_asserts(name: str, step: int) -> None:
    workload = _workload(name)
    steps = 0
    with pytest.raises(ReleaseCheckFailed, match=r"'lora-limit' fails: the running phase "
                       r"scheduled adapters \['adapter-a', 'adapter-b'\], more than "
                       r"max_loras=1 \(0\.32\.0 admission\)"):
        for _ in Driver(ImplSystem(workload.config), workload).steps():
            steps += 1
    assert steps == step


def test_the_twin_under_033_admission_never_reaches_it() -> None:
    def twin_033(config: EngineConfig) -> System:
        return ImplSystem(config, release="0.33.0")
    for name in ("lora-limit-assert-032", "lora-limit-assert-032-async"):
        result = run_lockstep(_workload(name), twin_033, twin_033)
        assert result.error is None and result.same_failure is None


def test_both_stopping_on_the_check_at_one_step_is_agreement() -> None:
    result = run_lockstep(_workload(), ImplSystem, AssertingTwin)
    assert result.error is None and result.divergences == () and result.steps == 24
    assert result.same_failure == (
        f"both systems stop at step 24 on release check 'lora-limit': upstream asserts "
        f"`{CHECKED}`, and the twin reproduces the bug")
    assert result.level_reached == "exact"
    assert judge(result, "exact", ())[0] == "passed"
    assert classify(result, "impl", "upstream").outcome == SAME_FAILURE


@pytest.mark.parametrize("kwargs, raised", [
    ({"other": True}, "left system impl raised ReleaseCheckFailed at step 24: release check "
                      "'lora-limit' fails: the running phase scheduled adapters ['adapter-a', "
                      "'adapter-b'], more than max_loras=1 (0.32.0 admission); the right system "
                      "raised AssertionError at that step too: some other assertion"),
    ({"fail_at": 11}, "right system impl raised AssertionError at step 10: "),
])
def test_another_check_or_another_step_is_an_error(kwargs: dict[str, bool],
                                                    raised: str) -> None:
    def right(config: EngineConfig) -> System:
        return AssertingTwin(config, **kwargs)
    result = run_lockstep(_workload(), ImplSystem, right)
    assert result.same_failure is None and result.error is not None
    assert result.error.startswith(raised)
    assert judge(result, "exact", ())[0] == "error"


def test_033_admission_parts_from_032_before_the_stop() -> None:
    """The workload tells the two admissions apart: a twin with the wrong switch diverges."""
    def twin_033(config: EngineConfig) -> System:
        return ImplSystem(config, release="0.33.0")
    result = run_lockstep(_workload(), ImplSystem, twin_033)
    divergence = result.divergence_at("schedule")
    assert result.same_failure is None and result.error is None
    assert divergence is not None and divergence.step < 24


def test_checks_are_read_from_the_twin_upstream_and_a_worker() -> None:
    twin = ReleaseCheckFailed("lora-limit", "two adapters")
    assert isinstance(twin, IntegrityError) and failures.failure_check(twin) == "lora-limit"
    try:
        _upstream_asserts({1, 2}, _Limits())
    except AssertionError as err:
        upstream: AssertionError = err
    assert failures.failure_check(upstream) == "lora-limit"
    assert failures.failure_check(AssertionError()) is None  # no source line: unknown
    assert failures.failure_check(ValueError(CHECKED)) is None  # not an assertion
    remote_twin = remote_error("ReleaseCheckFailed", str(twin), "Traceback ...")
    remote_upstream = remote_error("AssertionError", "", f"  File x\n    assert {CHECKED}\n"
                                   "AssertionError\n")
    assert failures.same_failure(remote_twin, remote_upstream) == "lora-limit"
    assert failures.same_failure(twin, None) is None
    assert failures.same_failure(twin, ReleaseCheckFailed("other", "x")) is None


def test_recorded_runs_that_stop_alike_agree(tmp_path: Path) -> None:
    """`vtwin record` + `vtwin compare`, and a campaign's three-or-more-systems path."""
    workload = _workload()
    left, right = record_run(workload, ImplSystem, "impl"), record_run(workload, AssertingTwin,
                                                                       "upstream")
    assert left.end == {"end": "error", "step": 24, "check": "lora-limit", "detail": (
        "ReleaseCheckFailed: release check 'lora-limit' fails: the running phase scheduled "
        "adapters ['adapter-a', 'adapter-b'], more than max_loras=1 (0.32.0 admission)")}
    assert right.end["check"] == "lora-limit" and right.end["step"] == 24
    result = compare_recorded(left, right)
    assert result.error is None and result.same_failure is not None
    assert compare_runs(left, right, "impl", "upstream").outcome == SAME_FAILURE
    moved = Recorded(right.system, right.workload, right.none_hash, right.records,
                     {**right.end, "step": 23})
    assert compare_recorded(left, moved).error is not None
    plain = Recorded(right.system, right.workload, right.none_hash, right.records,
                     {k: v for k, v in right.end.items() if k != "check"})
    assert compare_runs(left, plain, "impl", "upstream").outcome == "error"
