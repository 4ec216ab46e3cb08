"""Random scheduler-like operations on the twin alone (no vllm needed).

Two independent twins driven in lockstep must agree on every observable (so there is no hidden
shared or nondeterministic state) and pass `check_integrity()` after every operation. The sides
are named "impl-a" and "impl-b" so a failure message never blames upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

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


class _Choose:
    """Stands in for Hypothesis' `data` when a rule is called by hand: each `sampled_from`
    draw takes the first element `pick` accepts (any element when no pick is given)."""

    def __init__(self, **picks: Callable[[Any], bool]) -> None:
        self.picks = picks

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        pick = self.picks.get(label or "", lambda _: True)
        return next(e for e in strategy.elements if pick(e))


def test_the_hole_rule_evicts_inside_a_cached_run_and_the_hit_stops_at_the_hole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request computes 7 blocks (chunks of 4 blocks in the chunked-local group 1) and is
    preempted: every block but each group's last can be a hole. Evicting the chunked-local
    block at position 4 (the first of the last chunk's window) and admitting the request at
    once: full attention still hits 6 blocks, but the chunked-local scan must stop at the
    hole, so the hit is the 4 blocks before it (all null: outside the window) and the block
    after the hole is not taken in its place (the scan that goes on past a miss does)."""
    for module in ("machine", "holes"):  # outside a test run
        monkeypatch.setattr(f"conformance.kv.{module}.note", lambda _: None)
    machine = lockstep_machine(family_by_name("full_chunked_local"),
                               partial(ImplKV, name="impl-a"), partial(ImplKV, name="impl-b"))()
    machine.add_request(3, list(range(32)), None, None)  # 80-token prefix + 32: 7 blocks
    machine.admit(_Choose(), 112, 0, False, False)
    machine.finish(_Choose(), True)
    holes = machine._inner_cached_blocks()
    assert sorted({(hole.group, hole.position) for hole in holes}) == [
        (group, at) for group in (0, 1) for at in range(6)]
    machine.hole_then_hit(_Choose(hole=lambda h: h.group == 1 and h.position == 4), False, 16)
    (request,) = machine.requests.values()
    assert request.running and request.num_computed == 64 + 16
    full, local = machine.left.snapshot().tables[request.request_id]
    assert len(full) == len(local) == 5 and local[:4] == (0, 0, 0, 0)  # null before the window
    run = {hole.position: hole.block_id for hole in holes if hole.group == 1}
    assert local[4] not in (run[4], run[5])  # computed again, in a new block
