"""The interleaving, medians, ratios and target logic of the quick pass, on fake clocks."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.bench.measure import Case, Result, Target, format_table, run_case


class FakeState:
    def __init__(self, system: str, log: list[str], work: float = 1.0) -> None:
        self.system, self.log, self.work = system, log, work
        self.between_calls = 0

    def run(self) -> None:
        self.log.append(self.system)


def fake_case(log: list[str], costs: dict[str, list[float]], **kwargs: Any) -> Case:
    """A case whose 'seconds' come from `costs`, one per measurement, per system."""

    def measure(state: FakeState, number: int) -> float:
        state.run()
        return costs[state.system].pop(0)

    return Case("fake", "s", lambda system: FakeState(system, log), measure=measure, **kwargs)


def test_systems_alternate_and_the_order_flips_each_round() -> None:
    log: list[str] = []
    run_case(fake_case(log, {"impl": [1.0] * 4, "upstream": [2.0] * 4}), rounds=4)
    assert log == ["impl", "upstream", "upstream", "impl"] * 2


def test_values_are_medians_and_ratio_divides_them() -> None:
    costs = {"impl": [1.0, 9.0, 2.0], "upstream": [4.0, 5.0, 40.0]}
    result = run_case(fake_case([], costs), rounds=3)
    assert (result.impl, result.upstream) == (2.0, 5.0)
    assert result.ratio == pytest.approx(0.4)
    assert result.speedup == pytest.approx(2.5)  # lower is better: upstream / impl


def test_rates_divide_work_by_time_and_gain_is_the_ratio() -> None:
    costs = {"impl": [0.5], "upstream": [2.0]}
    case = Case("rate", "ops/s", lambda s: FakeState(s, [], work=100.0), lower_is_better=False,
                measure=lambda state, n: costs[state.system].pop(0))
    result = run_case(case, rounds=1)
    assert (result.impl, result.upstream) == (200.0, 50.0)
    assert result.speedup == pytest.approx(4.0)


def test_reusable_states_are_built_once_and_restored_between_rounds() -> None:
    built: list[str] = []
    states: dict[str, FakeState] = {}

    def prepare(system: str) -> FakeState:
        built.append(system)
        states[system] = FakeState(system, [])
        return states[system]

    def between(state: FakeState) -> None:
        state.between_calls += 1

    case = Case("reuse", "s", prepare, reusable=True, between=between,
                measure=lambda state, number: 1.0)
    run_case(case, rounds=3)
    assert sorted(built) == ["impl", "upstream"]
    assert states["impl"].between_calls == states["upstream"].between_calls == 2


@pytest.mark.parametrize(("kind", "bound", "impl", "upstream", "lower", "met"), [
    ("speedup_min", 5.0, 1.0, 5.0, True, True),
    ("speedup_min", 5.0, 1.0, 4.9, True, False),
    ("speedup_min", 3.0, 1.0, 3.0, False, True),  # a rate: 1 s vs 3 s is 3x
    ("impl_max", 1.0, 0.9, 10.0, True, True),
    ("impl_max", 1.0, 1.1, 10.0, True, False),
])
def test_targets(kind: str, bound: float, impl: float, upstream: float, lower: bool,
                 met: bool) -> None:
    costs = {"impl": [impl], "upstream": [upstream]}
    case = fake_case([], costs, target=Target(kind, bound, "goal"), lower_is_better=lower)
    result = run_case(case, rounds=1)
    assert result.met is met


def test_table_has_a_row_per_result() -> None:
    rows = [Result("a", "s", 1.0, 2.0, 0.5, 2.0, True), Result("b", "x/s", 3.0, 1.0, 3.0, 3.0,
                                                              False, "t", False)]
    table = format_table(rows).splitlines()
    assert len(table) == 4 and table[2].startswith("a ") and "NOT met (t)" in table[3]
