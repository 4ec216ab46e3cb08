"""Interleaved measurement: impl and upstream alternate round by round, medians per system.

The quick pass runs on shared, noisy machines. Measuring the two systems in alternation (the
order flips each round) means a burst of load from a neighbour slows both sides of a ratio
rather than one, and medians ignore the rounds it hit hardest. Work that only sets a state up
happens between the timed regions, never inside them.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SYSTEM_ORDER: tuple[str, str] = ("impl", "upstream")


@dataclass(frozen=True, slots=True)
class Target:
    """A goal from the issue. `kind`: "speedup_min" (upstream cost / impl cost >= bound) or
    "impl_max" (impl's own value <= bound, in the case's unit)."""

    kind: str
    bound: float
    text: str

    def met(self, result: Result) -> bool:
        if self.kind == "speedup_min":
            return result.speedup >= self.bound
        return result.impl <= self.bound


def _time_runs(state: Any, number: int) -> float:
    """Seconds per `run()`, minus the stub model runner's share where the state has one.

    The cyclic garbage collector is off while the clock runs, as in `timeit` and asv: a full
    collection's cost depends on everything else alive in the process (upstream's modules,
    the other system's state), not on the code under test.
    """
    loop = getattr(state, "loop", None)
    stub_before = loop.stub_seconds if loop is not None else 0.0
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            state.run()
        elapsed = time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    if loop is not None:
        elapsed -= loop.stub_seconds - stub_before
    return elapsed / number


@dataclass(frozen=True, slots=True)
class Case:
    """One quick-pass measurement.

    `prepare(system)` builds a state with `run()` and `work` (units per run). The reported value
    is `scale * work / seconds` for rates (`lower_is_better=False`), `scale * seconds / work`
    otherwise. A `reusable` state is built once per system and run `number` times per round,
    calibrated to `min_time`; `between(state)` restores it between rounds. `measure` replaces
    the wall-clock timing for self-timed cases (import time in a child process, memory).
    """

    name: str
    unit: str
    prepare: Callable[[str], Any]
    lower_is_better: bool = True
    scale: float = 1.0
    reusable: bool = False
    between: Callable[[Any], None] | None = None
    measure: Callable[[Any, int], float] = _time_runs
    rounds: int | None = None
    target: Target | None = None
    note: str = ""


@dataclass(slots=True)
class Result:
    name: str
    unit: str
    impl: float
    upstream: float
    ratio: float
    speedup: float
    lower_is_better: bool
    target: str | None = None
    met: bool | None = None
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _number(case: Case, state: Any, min_time: float) -> int:
    if not case.reusable:
        return 1
    once = max(case.measure(state, 1), 1e-7)
    return max(1, min(10_000, int(min_time / once)))


def run_case(case: Case, rounds: int, min_time: float = 0.05,
             progress: Callable[[str], None] | None = None) -> Result:
    """Measure `case` on both systems, interleaved, and reduce to medians and a ratio."""
    rounds = case.rounds or rounds
    raw: dict[str, list[float]] = {s: [] for s in SYSTEM_ORDER}
    kept: dict[str, Any] = {}
    numbers: dict[str, int] = {}
    for index in range(rounds):
        order = SYSTEM_ORDER if index % 2 == 0 else SYSTEM_ORDER[::-1]
        for system in order:
            if case.reusable and system in kept:
                state = kept[system]
                if case.between is not None:
                    case.between(state)
            else:
                state = case.prepare(system)
                if case.reusable:
                    kept[system] = state
                    numbers[system] = _number(case, state, min_time)
            seconds = case.measure(state, numbers.get(system, 1))
            raw[system].append(_value(case, seconds, state.work))
            del state
    kept.clear()
    impl, upstream = (statistics.median(raw[s]) for s in SYSTEM_ORDER)
    ratio = impl / upstream if upstream else float("nan")
    speedup = (1 / ratio if case.lower_is_better else ratio) if ratio else float("nan")
    result = Result(case.name, case.unit, impl, upstream, ratio, speedup, case.lower_is_better,
                    note=case.note, samples=raw)
    if case.target is not None:
        result.target = case.target.text
        result.met = case.target.met(result)
    if progress is not None:
        progress(format_row(result))
    return result


def _value(case: Case, seconds: float, work: float) -> float:
    """Per-unit cost (or rate) of one run. Self-timed cases return their measure as `seconds`
    with `work == 1`, so they come out unchanged apart from `scale`."""
    if case.lower_is_better:
        return case.scale * seconds / work
    return case.scale * work / seconds if seconds > 0 else float("inf")


# -- presentation ----------------------------------------------------------------------------
HEADER = ("case", "impl", "upstream", "unit", "impl/upstream", "impl gain", "target")


def _fmt(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _target_cell(result: Result) -> str:
    if result.target is None:
        return ""
    return f"{'met' if result.met else 'NOT met'} ({result.target})"


def row_cells(result: Result) -> tuple[str, ...]:
    return (result.name, _fmt(result.impl), _fmt(result.upstream), result.unit,
            f"{result.ratio:.3f}", f"{result.speedup:.2f}x", _target_cell(result))


def format_row(result: Result) -> str:
    return "  ".join(row_cells(result))


def format_table(results: Sequence[Result]) -> str:
    rows = [HEADER, *(row_cells(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
