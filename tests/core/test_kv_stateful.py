"""Random scheduler-like operations on the twin alone (no vllm needed).

Two independent twins driven in lockstep must agree on every observable (so there is no hidden
shared or nondeterministic state) and pass `check_integrity()` after every operation. The sides
are named "impl-a" and "impl-b" so a failure message never blames upstream.
"""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import settings

from conformance.kv.family import FAMILIES, KVFamily, family_by_name
from conformance.kv.machine import lockstep_machine
from conformance.kv.systems import ImplKV, Snapshot


def _test_case(family: KVFamily) -> type:
    machine = lockstep_machine(family, partial(ImplKV, name="impl-a"),
                               partial(ImplKV, name="impl-b"))
    case = machine.TestCase
    case.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
    return case


for _family in FAMILIES:
    globals()[f"TestImplKV_{_family.name}"] = _test_case(_family)


class _ReversedQueue(ImplKV):
    """A planted bug: reports its free queue in reverse order."""

    def snapshot(self) -> Snapshot:
        snapshot = super().snapshot()
        snapshot.free_queue.reverse()
        return snapshot


def test_a_divergence_is_reported_by_its_invariant_with_both_system_names() -> None:
    machine = lockstep_machine(family_by_name("full_bs16"), partial(ImplKV, name="impl"),
                               partial(_ReversedQueue, name="planted"))()
    machine.free_counts_agree()  # the count is right; only the order is wrong
    with pytest.raises(AssertionError) as failure:
        machine.free_queue_orders_agree()
    message = str(failure.value)
    assert message.startswith("free_queue differs:")
    assert "\n  impl:    [1, 2," in message and "\n  planted: [23, 22," in message
    assert "upstream" not in message
