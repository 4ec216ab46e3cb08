"""`vtwin bench --trace`: a whole workload once per system, build and replay timed apart."""

from __future__ import annotations

import pytest

import workloads
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
    with pytest.raises(ValueError, match="unknown system 'other'"):
        time_traces(workloads.load("mooncake"), ["other"])
