"""The search: uniform draws, or a corpus of workloads that reached something new, varied.

Both strategies draw fresh workloads from the campaign families in the same order
(`families.workload_for(family, seed)`: family by family, seeds counting up from `--seed`), so
what differs between them is only what guidance adds:

* ``uniform`` runs fresh draws only (what `vtwin campaign` does);
* ``guided`` runs `seed_runs` fresh draws first, then mutants (`mutate.havoc`) of corpus
  entries and fresh draws, each chosen in proportion to what it has been yielding lately (new
  features per run, a moving average per kind: a two-armed bandit), never less often than
  `least_share` of the runs, so guidance spends its time on fresh draws while they still pay
  and on mutants once they saturate. A run whose features (`features`: twin and upstream
  arcs, activity buckets) include one no earlier run had joins the corpus. Entries are picked
  in proportion to what they added, divided by how often they were picked already (AFL's
  favouring of productive, little-explored inputs).

Every run's pair is judged as the campaign judges it (`task.classify`); a failure is kept once
per signature with its workload, and the search goes on (or stops, `stop_on_failure`, when the
question is how long finding one takes). The timeline (seconds, runs, twin and upstream arcs)
is what the report compares strategies by: branches per hour, time to a planted bug.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from conformance.campaign.families import workload_for
from conformance.campaign.task import Comparison
from conformance.guided.features import TWIN, UPSTREAM, Feature
from conformance.guided.mutate import havoc
from workloads.model import Workload

Strategy = Literal["guided", "uniform"]
STRATEGIES: tuple[Strategy, ...] = ("guided", "uniform")
MUTANT_ORIGIN = "mutant of "
YIELD_WEIGHT = 0.1
"""How much one run moves its kind's yield average (about the last ten runs count)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One workload run on the pair: how it compared, and what it reached."""

    comparison: Comparison
    features: frozenset[Feature]


Runner = Callable[[Workload], Outcome]


@dataclass(frozen=True, slots=True)
class Settings:
    strategy: Strategy
    families: tuple[str, ...]
    seed: int = 0
    seconds: float | None = None
    runs: int | None = None
    seed_runs: int = 16
    """Guided: fresh draws before the first mutant (the corpus starts from what they reach)."""
    least_share: float = 0.1
    """Guided: the least share of runs either kind (fresh draws, mutants) gets."""
    stop_on_failure: bool = False

    def __post_init__(self) -> None:
        if self.seconds is None and self.runs is None:
            raise ValueError("a search needs a budget: seconds, runs or both")


@dataclass(slots=True)
class Entry:
    """A corpus workload: what it added when it joined, how often it was varied since."""

    workload: Workload
    origin: str
    added: int
    picked: int = 0

    @property
    def weight(self) -> float:
        return self.added / (1 + self.picked)


@dataclass(frozen=True, slots=True)
class Point:
    """The search's state after one run."""

    seconds: float
    runs: int
    twin_arcs: int
    upstream_arcs: int
    corpus: int
    failures: int


@dataclass(frozen=True, slots=True)
class Found:
    """The first workload that failed with a signature."""

    seconds: float
    run: int
    comparison: Comparison
    workload: Workload
    origin: str


@dataclass(slots=True)
class Search:
    """One strategy's search, run by `run()` until its budget is spent."""

    settings: Settings
    runner: Runner
    clock: Callable[[], float] = time.monotonic
    seen: set[Feature] = field(default_factory=set)
    corpus: list[Entry] = field(default_factory=list)
    timeline: list[Point] = field(default_factory=list)
    found: dict[str, Found] = field(default_factory=dict)
    replay: list[tuple[Workload, str]] = field(default_factory=list)
    """Workloads of an earlier corpus (`--corpus`), run first: what they reach is seen, and
    each that reaches something joins this corpus."""
    replayed: int = 0
    fresh: int = 0
    mutants: int = 0
    yields: dict[str, float] = field(default_factory=lambda: {"fresh": 1.0, "mutant": 1.0})
    """New features per run lately, per kind of run (moving averages, `YIELD_WEIGHT`)."""
    invalid: int = 0
    """Mutants the workload format refused (or that no operator applied to)."""
    errors: list[str] = field(default_factory=list)
    """Fresh draws whose generator raised (family, seed and the error, one line each)."""

    def run(self) -> Search:
        settings = self.settings
        rng = random.Random(f"vtwin/guided/{settings.strategy}/{settings.seed}")
        started = self.clock()
        while not self._spent(self.clock() - started):
            candidate = self._next(rng)
            if candidate is None:
                continue
            workload, origin = candidate
            outcome = self.runner(workload)
            new = outcome.features - self.seen
            self.seen |= new
            kind = "mutant" if origin.startswith(MUTANT_ORIGIN) else "fresh"
            self.yields[kind] += YIELD_WEIGHT * (len(new) - self.yields[kind])
            if new:
                self.corpus.append(Entry(workload, origin, len(new)))
            elapsed = self.clock() - started
            comparison = outcome.comparison
            if comparison.failed and comparison.signature not in self.found:
                self.found[comparison.signature] = Found(elapsed, self.runs, comparison,
                                                         workload, origin)
            self.timeline.append(Point(round(elapsed, 3), self.runs, self.arcs(TWIN),
                                       self.arcs(UPSTREAM), len(self.corpus),
                                       len(self.found)))
            if self.found and settings.stop_on_failure:
                break
        return self

    @property
    def runs(self) -> int:
        return self.replayed + self.fresh + self.mutants

    def arcs(self, side: str) -> int:
        return sum(1 for feature in self.seen if feature[0] == side)

    def _spent(self, elapsed: float) -> bool:
        settings = self.settings
        return ((settings.seconds is not None and elapsed >= settings.seconds)
                or (settings.runs is not None and self.runs >= settings.runs))

    def _next(self, rng: random.Random) -> tuple[Workload, str] | None:
        settings = self.settings
        if self.replayed < len(self.replay):
            self.replayed += 1
            return self.replay[self.replayed - 1]
        if settings.strategy != "guided" or not self.corpus or self.runs < settings.seed_runs:
            return self._draw()
        total = self.yields["fresh"] + self.yields["mutant"]
        share = self.yields["mutant"] / total if total > 0 else 0.5
        share = min(1 - settings.least_share, max(settings.least_share, share))
        return (self._mutant(rng) if rng.random() < share else None) or self._draw()

    def _draw(self) -> tuple[Workload, str] | None:
        families = self.settings.families
        family = families[self.fresh % len(families)]
        seed = self.settings.seed + self.fresh // len(families)
        self.fresh += 1
        try:
            workload, _ = workload_for(family, seed, ("impl", "vllm"))
        except Exception as err:  # a generator bug is reported, the search goes on
            self.errors.append(f"{family} seed {seed}: {type(err).__name__}: {err}")
            return None
        return workload, f"{family}-seed{seed}"

    def _mutant(self, rng: random.Random) -> tuple[Workload, str] | None:
        entry = rng.choices(self.corpus, weights=[e.weight for e in self.corpus])[0]
        entry.picked += 1
        donors = [e.workload for e in rng.sample(self.corpus, min(4, len(self.corpus)))]
        made = havoc(entry.workload, rng, donors)
        if made is None:
            self.invalid += 1
            return None
        self.mutants += 1
        workload, operators = made
        name = f"mutant{self.mutants}"
        origin = f"{MUTANT_ORIGIN}{entry.origin} + {'+'.join(operators)}"
        return replace(workload, name=name, description=f"guided mutant: {origin}"), origin
