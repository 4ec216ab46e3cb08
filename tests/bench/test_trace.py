"""`vtwin bench --trace`: a whole workload once per system, build and replay timed apart; and
the drop-in on the fake runner (the twin behind upstream's scheduler interface)."""

from __future__ import annotations

import pytest

import workloads
from conformance.bench.dropin_fake import FakeRunnerTiming, time_fake_runner, time_fake_runners
from conformance.bench.trace import time_traces


def test_a_trace_replays_to_completion_on_the_twin_with_counts() -> None:
    workload = workloads.load("mooncake")
    (timing,) = time_traces(workload, ["impl"])
    assert (timing.system, timing.workload, timing.requests) == ("impl", "mooncake", 100)
    assert (timing.steps, timing.scheduled_tokens) == (1169, timing.scheduled_tokens)
    assert timing.scheduled_tokens > 0 and timing.build_seconds > 0
    assert timing.to_json()["total_seconds"] == timing.total_seconds
    assert timing.line().startswith("impl      mooncake: 100 requests, build ")


def test_two_runs_of_the_twin_agree() -> None:
    first, second = time_traces(workloads.load("mooncake"), ["impl", "impl"])
    assert (first.steps, first.scheduled_tokens) == (second.steps, second.scheduled_tokens)


def test_unknown_system_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scheduler 'other'"):
        time_traces(workloads.load("mooncake"), ["other"])


def test_fake_runner_timing_reports_the_scheduling_share() -> None:
    timing = FakeRunnerTiming("impl", "mooncake", steps=10, scheduled_tokens=50,
                              sched_ms_per_step=0.03, step_ms=0.04)
    assert timing.sched_share == pytest.approx(75.0)
    assert timing.to_json()["runner"] == "fake"
    assert "schedule + update 0.0300 ms/step (75.0% of the step)" in timing.line()
    with pytest.raises(ValueError, match="unknown scheduler 'dropin'"):
        time_fake_runner("dropin", workloads.load("mooncake"))


@pytest.mark.oracle
def test_the_dropin_replays_upstreams_steps_through_its_interface() -> None:
    """The twin as `scheduler_cls` (adapter included) on the fake runner: the same steps and
    tokens as upstream's scheduler and as the twin driven directly."""
    pytest.importorskip("vllm", reason="the drop-in runs behind upstream vLLM's interface")
    workload = workloads.load("mooncake")
    impl, upstream, dropin = time_traces(workload, ["impl", "upstream", "dropin"])
    assert dropin.system == "dropin"
    assert (dropin.steps, dropin.scheduled_tokens) == (upstream.steps, upstream.scheduled_tokens)
    assert (impl.steps, impl.scheduled_tokens) == (upstream.steps, upstream.scheduled_tokens)
    fake_upstream, fake_impl = time_fake_runners(workload)
    assert (fake_upstream.scheduler, fake_impl.scheduler) == ("upstream", "impl")
    assert fake_impl.steps == fake_upstream.steps == 1169
    for timing in (fake_upstream, fake_impl):
        assert 0 < timing.sched_ms_per_step <= timing.step_ms
