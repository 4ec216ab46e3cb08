"""Random scheduler-like operations on the twin alone (no vllm needed).

Two independent twins driven in lockstep must agree on every observable (so there is no hidden
shared or nondeterministic state) and pass `check_integrity()` after every operation.
"""

from __future__ import annotations

from hypothesis import settings

from conformance.kv.family import FAMILIES, KVFamily
from conformance.kv.machine import KVLockstepMachine
from conformance.kv.systems import ImplKV, KVSystem


def make_machine(family: KVFamily) -> type[KVLockstepMachine]:
    class Machine(KVLockstepMachine):
        def make_left(self, none_hash: bytes) -> KVSystem:
            return ImplKV(family, none_hash)

        def make_right(self, none_hash: bytes) -> KVSystem:
            return ImplKV(family, none_hash)

    Machine.family = family
    return Machine


def _test_case(family: KVFamily) -> type:
    case = make_machine(family).TestCase
    case.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
    return case


for _family in FAMILIES:
    globals()[f"TestImplKV_{_family.name}"] = _test_case(_family)
