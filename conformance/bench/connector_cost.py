"""What a KV connector costs the harness: a lockstep conformance run (the twin against upstream,
every step compared, the twin's integrity checked every step) of one workload without and
with the CPU offload tier, in steps per second.

Issue 31's case: the first 300 requests of the Mooncake synthetic trace as recorded, a GPU pool
of 9,000 blocks and, with the connector, an eager CPU tier of 40,000 blocks. Before the pools'
states were kept as they change (`impl.core.block_states`,
`conformance.systems.upstream.pool_watch`), every step walked both CPU pools two or three
times: measured at stop 37 (pure twin, 2 cores), 16.2 steps/s with the connector against 44.6
without, a share of 0.36; after, 88.9 against 71.9 (the run with the tier does less prefill
work per step once prefixes come back from the CPU). The target is a share of 0.5. Both runs
stop after the same number of steps (`MAX_STEPS`), so they time the same stretch of the trace;
both must pass at `exact`, or the timing means nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

TRACE = "mooncake-full"
NUM_REQUESTS = 300
GPU_BLOCKS = 9_000
CPU_BLOCKS = 40_000
MAX_STEPS = 1_500
TARGET_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class LockstepTiming:
    connector: str  # "none" or the connector's description
    workload: str
    steps: int
    seconds: float

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "steps_per_second": self.steps_per_second}

    def line(self) -> str:
        return (f"lockstep {self.workload}, connector {self.connector}: {self.steps:,} steps "
                f"in {self.seconds:.1f} s, {self.steps_per_second:.1f} steps/s")


def connector_workloads(kind: str = "simple_cpu_offload") -> tuple[Any, Any]:
    """The case without and with the CPU tier (requests, plans and aborts of the first
    `NUM_REQUESTS` rows of the trace): SimpleCPUOffload's eager tier of `CPU_BLOCKS` blocks,
    or (`offloading`) the OffloadingConnector's LRU tier of as many one-block chunks."""
    import workloads
    from workloads.model import KVConnectorConfig

    whole = workloads.load(TRACE)
    kept = whole.requests[:NUM_REQUESTS]
    ids = {r.request_id for r in kept}
    base = replace(
        whole, name=f"{TRACE}[:{NUM_REQUESTS}]", requests=kept,
        plans=tuple(p for p in whole.plans if p.request_id in ids),
        aborts=tuple(a for a in whole.aborts if a.request_id in ids),
        config=replace(whole.config, num_blocks=GPU_BLOCKS))
    tier = (KVConnectorConfig("offloading", num_cpu_chunks=CPU_BLOCKS) if kind == "offloading"
            else KVConnectorConfig(num_cpu_blocks=CPU_BLOCKS))
    return base, replace(base, config=replace(base.config, kv_connector=tier))


def time_lockstep(workload: Any, connector: str) -> LockstepTiming:
    """One lockstep run of `workload` (twin against the installed upstream) for `MAX_STEPS`."""
    from conformance.sched.lockstep import run_lockstep
    from conformance.systems.registry import factory_for
    from conformance.systems.specs import parse_spec

    twin, upstream = (factory_for(parse_spec(s)) for s in ("impl", "upstream"))
    try:
        start = time.perf_counter()
        result = run_lockstep(workload, twin, upstream, max_steps=MAX_STEPS)
        seconds = time.perf_counter() - start
    finally:
        twin.close()
        upstream.close()
    if result.level_reached != "exact":
        raise AssertionError(f"{workload.name} (connector {connector}) did not stay exact: "
                             f"error {result.error}, divergences {result.divergences}")
    return LockstepTiming(connector, workload.name, result.steps, seconds)


@dataclass(frozen=True, slots=True)
class ConnectorCost:
    without: LockstepTiming
    with_connector: LockstepTiming
    rounds: int

    @property
    def share(self) -> float:
        """Steps/s with the connector over steps/s without."""
        return self.with_connector.steps_per_second / self.without.steps_per_second

    @property
    def met(self) -> bool:
        return self.share >= TARGET_SHARE

    def line(self) -> str:
        return (f"with the connector / without: {self.share:.2f} of the steps/s "
                f"({'met' if self.met else 'NOT met'}: target >= {TARGET_SHARE:.0%}; the "
                f"faster of {self.rounds} runs each)")


def time_connector_cost(rounds: int = 2, kind: str = "simple_cpu_offload") -> ConnectorCost:
    """Both runs, alternating for `rounds` rounds, the faster of each kept (a neighbour's
    load slows a run, nothing speeds one up). Upstream is imported before the clock starts."""
    import conformance.systems.upstream.system  # noqa: F401  (vllm's import, ~6 s)

    without, with_tier = connector_workloads(kind)
    tier = (f"OffloadingConnector (LRU, {CPU_BLOCKS:,} chunks)" if kind == "offloading"
            else f"CPU offload (eager, {CPU_BLOCKS:,} blocks)")
    runs: dict[str, list[LockstepTiming]] = {"none": [], tier: []}
    for index in range(rounds):
        order = ("none", tier) if index % 2 == 0 else (tier, "none")
        for kind in order:
            runs[kind].append(time_lockstep(without if kind == "none" else with_tier, kind))
    fastest = [min(runs[kind], key=lambda t: t.seconds) for kind in ("none", tier)]
    return ConnectorCost(fastest[0], fastest[1], rounds)
