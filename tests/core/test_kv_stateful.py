"""Random scheduler-like operations on the twin alone (no vllm needed).

Two independent twins driven in lockstep must agree on every observable (so there is no hidden
shared or nondeterministic state) and pass `check_integrity()` after every operation. The sides
are named "impl-a" and "impl-b" so a failure message never blames upstream.
"""

from __future__ import annotations

from functools import partial

from hypothesis import settings

from conformance.kv.family import FAMILIES, KVFamily
from conformance.kv.machine import lockstep_machine
from conformance.kv.systems import ImplKV


def _test_case(family: KVFamily) -> type:
    machine = lockstep_machine(family, partial(ImplKV, name="impl-a"),
                               partial(ImplKV, name="impl-b"))
    case = machine.TestCase
    case.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
    return case


for _family in FAMILIES:
    globals()[f"TestImplKV_{_family.name}"] = _test_case(_family)
