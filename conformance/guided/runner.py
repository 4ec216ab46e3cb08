"""`PairRunner`: one workload on the pair, in lockstep, traced, judged as the campaign judges.

The pair is built once (`resolve_system`; a bare twin follows the reference's release, as in
`vtwin conform`). Its first traced run also executes what only a first run does (lazy imports,
first engine builds), which would credit whichever workload came first with thousands of arcs
no later run can repeat; `warm_up` runs a small fixed workload once and hands its features to
the search as already seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.campaign.families import workload_for
from conformance.campaign.task import classify, pairs_of
from conformance.guided.features import ArcProbe, Feature, activity_features, traced_spec
from conformance.guided.search import Outcome
from conformance.guided.state import StateProbe
from conformance.sched.lockstep import run_lockstep
from conformance.systems.protocol import SystemFactory
from conformance.systems.registry import resolve_system
from workloads.model import Workload

WARM_UP = ("prefix-sharing", 0)
"""The (family, seed) run once before the search; its features count as seen."""


@dataclass(slots=True)
class PairRunner:
    left: str
    right: str
    left_factory: SystemFactory
    right_factory: SystemFactory
    probe: ArcProbe
    state: StateProbe

    @staticmethod
    def of(left: str, right: str, probe: ArcProbe | None = None) -> PairRunner:
        (left_spec, right_spec), = pairs_of((traced_spec(left), traced_spec(right)))
        state = StateProbe()
        state.install()
        return PairRunner(left_spec, right_spec, resolve_system(left_spec),
                          resolve_system(right_spec), probe or ArcProbe.here(), state)

    def __call__(self, workload: Workload) -> Outcome:
        self.state.take()
        result, arcs = self.probe.run(
            lambda: run_lockstep(workload, self.left_factory, self.right_factory))
        return Outcome(classify(result, self.left, self.right),
                       arcs | activity_features(result.activity) | self.state.take())

    def warm_up(self) -> frozenset[Feature]:
        workload, _ = workload_for(*WARM_UP, (self.left, self.right))
        return self(workload).features
