"""The continuum policy against the rebuilt fork, and fcfs against upstream, in lockstep.

The twin's `continuum` policy must reach `exact` against `continuum-fork` (seed 002's changes
on upstream 0.32's scheduler) on the agentic family over seeds, pool sizes (down to one
`max_model_len` request plus a few blocks, where pins crowd the pool) and both estimators, and
on a Hypothesis family; with the policy off, the twin and the fork must both be upstream.
Every run also checks integrity after every step (the driver does) and that pins never leak:
the run ends with every block free and no pin held.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, note, settings, target

from conformance.sched.driver import Driver
from conformance.sched.lockstep import run_lockstep
from conformance.sched.strategies.continuum import continuum_workloads
from conformance.systems.registry import factory_for
from conformance.systems.specs import parse_spec
from workloads import dumps, generate
from workloads.model import Estimator, Policy, Workload

pytestmark = pytest.mark.oracle

IMPL = factory_for(parse_spec("impl"))
FORK = factory_for(parse_spec("continuum-fork"))
UPSTREAM = factory_for(parse_spec("upstream"))


def agentic(seed: int, num_blocks: int, estimator: Estimator = "fixed", scale: float = 3.0,
            policy: Policy = "continuum") -> Workload:
    w = generate("agentic", seed=seed, scale=scale)
    assert w.config.continuum is not None
    config = dataclasses.replace(w.config, num_blocks=num_blocks, policy=policy,
                                 continuum=dataclasses.replace(w.config.continuum,
                                                               estimator=estimator))
    return dataclasses.replace(w, config=config)


def assert_exact(workload: Workload, left: object, right: object) -> int:
    result = run_lockstep(workload, left, right)  # type: ignore[arg-type]
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    divergence = result.divergence_at("exact")
    assert divergence is None, divergence.summary()
    assert result.stall is None, result.stall
    return result.activity.preemptions


@pytest.mark.parametrize("estimator", ["fixed", "learned"])
@pytest.mark.parametrize("num_blocks", [194, 200, 260, 321])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twin_continuum_equals_rebuilt_fork(seed: int, num_blocks: int,
                                            estimator: Estimator) -> None:
    assert_exact(agentic(seed, num_blocks, estimator), IMPL, FORK)


@pytest.mark.parametrize("num_blocks", [200, 321])
@pytest.mark.parametrize("seed", [0, 1])
def test_policy_off_twin_and_fork_are_upstream(seed: int, num_blocks: int) -> None:
    workload = agentic(seed, num_blocks, policy="fcfs")
    assert_exact(workload, IMPL, UPSTREAM)
    assert_exact(workload, FORK, UPSTREAM)


def test_fork_with_policy_off_builds_upstreams_own_scheduler() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    fork = FORK(agentic(0, 321, policy="fcfs").config)
    assert type(fork.scheduler) is Scheduler  # type: ignore[attr-defined]
    built = FORK(agentic(0, 321).config)
    assert type(built.scheduler).__name__ == "ContinuumForkScheduler"  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", [IMPL, FORK], ids=["impl", "continuum-fork"])
def test_pins_never_leak(factory: object) -> None:
    """Integrity after every step; at the end no pin, no active block, no request."""
    workload = agentic(1, 200, "learned")
    system = factory(workload.config)  # type: ignore[operator]
    pinned_steps = 0
    for _ in Driver(system, workload, integrity_every=1).steps():
        pinned_steps += bool(system.state().pinned)
    state = system.state()
    assert pinned_steps > 100  # pins were held for a good part of the run
    assert state.pinned == () and state.running == () and state.waiting == ()
    assert state.blocks.active == 0
    assert not system.has_requests()


def test_twin_and_fork_write_the_same_trace() -> None:
    """Seed 002's records (snapshot, prefix-cache events, decision) from both, step by step."""
    from impl.sched.tracing.tracer import StepSnapshot, Tracer

    workload = agentic(0, 200, "learned")
    traces = []
    for factory in (IMPL, FORK):
        system = factory(workload.config)
        tracer = Tracer()
        system.attach_tracer(tracer)  # type: ignore[attr-defined]
        for _ in Driver(system, workload).steps():
            pass
        traces.append(tracer.records)
    assert traces[0] == traces[1]
    snapshots = [r for r in traces[0] if isinstance(r, StepSnapshot)]
    assert max(s.pinned_unique_blocks for s in snapshots) > 100
    assert all(s.pinned_unique_blocks <= s.pinned_blocks for s in snapshots)


def test_a_wrong_victim_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the twin preempts the tail like FCFS; the lockstep must see it."""
    from impl.sched.continuum.policy import ContinuumPolicy

    monkeypatch.setattr(ContinuumPolicy, "victim_index",
                        lambda self, running, start: len(running) - 1)
    result = run_lockstep(agentic(2, 260), IMPL, FORK)
    assert result.divergence_at("exact") is not None


@settings(max_examples=60, deadline=None)
@given(continuum_workloads())
def test_generated_continuum_workloads_match_the_fork(workload: Workload) -> None:
    note(dumps(workload))
    result = run_lockstep(workload, IMPL, FORK)
    target(float(result.activity.preemptions), label="preemptions")
    target(float(min(result.activity.prefix_hit_tokens, 512)), label="prefix hits")
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    divergence = result.divergence_at("exact")
    assert divergence is None, divergence.summary()
