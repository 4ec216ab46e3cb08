"""`vtwin connector-check`: run any KV connector's scheduler side through upstream's scheduler
and watch the contract between them (issue 11).

The connector class (``module:Class``, loaded by upstream as `--kv-transfer-config` would)
runs inside upstream vLLM's real `Scheduler` on a workload, driven by the harness's `Driver`.
Its methods are wrapped so every call is checked, one line per violation (step, request, what):

* **promised vs allocated**: `update_state_after_alloc` must be told at most the external
  tokens `get_num_new_matched_tokens` promised for that request, and the request's block table
  must cover its local hit plus those tokens;
* **loads for unknown requests**: a finished load reported for a request the scheduler does not
  know, or that never waited for one;
* **stuck loads**: a request waiting for its load (WAITING_FOR_REMOTE_KVS) for more steps than
  the transfer latency plus the liveness patience;
* **hits by source**: `get_external_cache_hit_sources` (what the metrics report as the
  external prefix-cache hits per tier) must split exactly the tokens it is asked about, with
  no empty entries: upstream reports a split that does not add up as `external_unspecified`,
  silently losing the connector's tiers from the dashboards;
* **leaks**: blocks still referenced once every request has finished and the transfers have
  drained (GPU pool; the CPU tier's too for SimpleCPUOffloadConnector);
* **exceptions** raised inside a connector method, named.

The worker side is the harness's transfer worker when the connector's metadata has
SimpleCPUOffload's fields, and its job worker when the connector is checked with the
OffloadingConnector's settings (`settings="offloading"`: upstream's OffloadingConnector, or a
fork's subclass of it, loads and stores by job id), and the P/D worker with its modelled peer
under the NIXL connector's (`settings="nixl"`: pulls and reads of held prefills, the
workload's requests taking turns as decodes and prefills); for any other connector a generic one
reports each waiting request's load finished `load_latency_steps` after it started waiting
(stores cannot be modelled without knowing the connector's protocol, so a store-only
connector is checked on its scheduler-side bookkeeping alone). A load counts as stuck only
until it is reported finished: after that the request waits for admission, which steps that
preempt skip.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Any

from conformance.sched.driver import Driver, Stalled
from conformance.sched.liveness import STALL_PATIENCE
from conformance.systems.connector import pool_counts
from conformance.systems.protocol import RunnerOutput, Scheduled
from conformance.systems.transfer_records import ConnectorReport
from vtwin.errors import UserError
from workloads.model import KVConnectorConfig, Workload


@dataclass(slots=True)
class ContractReport:
    connector: str
    workload: str
    steps: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations


def load_connector_class(spec: str) -> tuple[str, str]:
    """(module, class name) of ``module:Class``, checked importable."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UserError(f"connector {spec!r}: expected module:Class")
    try:
        getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise UserError(f"connector {spec!r}: {type(err).__name__}: {err}") from None
    return module_name, name


def check_connector(spec: str, workload: Workload, *, load_latency_steps: int = 1,
                    cpu_blocks: int | None = None,
                    settings: str = "simple_cpu_offload") -> ContractReport:
    """Run `workload` through upstream's scheduler with the connector `spec` plugged in, given
    SimpleCPUOffload's settings, the OffloadingConnector's (`settings="offloading"`) or the
    NIXL connector's (`settings="nixl"`), with `cpu_blocks` CPU blocks or chunks (default:
    twice the GPU pool)."""
    module_name, name = load_connector_class(spec)
    config = workload.config
    size = cpu_blocks or 2 * config.num_blocks
    offloading = settings in ("offloading", "nixl")  # a worker the harness knows
    connector = (KVConnectorConfig("offloading", load_latency_steps=load_latency_steps,
                                   store_latency_steps=load_latency_steps, num_cpu_chunks=size)
                 if settings == "offloading" else
                 KVConnectorConfig("nixl", load_latency_steps=load_latency_steps,
                                   send_latency_steps=load_latency_steps)
                 if settings == "nixl" else
                 KVConnectorConfig(num_cpu_blocks=size, load_latency_steps=load_latency_steps))
    workload = replace(workload, config=replace(config, kv_connector=connector))
    if settings == "nixl" and not any(r.kv_transfer for r in workload.requests):
        from conformance.sched.offload_suite import with_pd_roles

        workload = replace(workload, requests=with_pd_roles(workload))
    report = ContractReport(spec, workload.name)
    system = _plugged_system(workload, module_name, name)
    watch = _Watch(report, system.scheduler, load_latency_steps)
    watch.wrap()
    driver = (Driver(system, workload)
              if offloading or _speaks_simple_offload(system.scheduler.connector)
              else _GenericDriver(system, workload, watch))
    try:
        for step in driver.steps():
            report.steps = step.record.step + 1
            watch.after_step(step.record.step)
    except Stalled as stalled:
        report.violations.append(f"step {stalled.step}: the run stalled ({stalled.reason})")
    except Exception as err:  # noqa: BLE001 (a connector may raise anything; name it)
        report.violations.append(f"step {report.steps}: {type(err).__name__} raised: {err}")
    watch.final()
    return report


def _plugged_system(workload: Workload, module_name: str, name: str) -> Any:
    """Upstream's scheduler with the plugged connector (SimpleCPUOffload's byte budget and
    `kv_cache_tensors` sizing apply to any connector that reads them)."""
    from conformance.systems.upstream.eras import installed_adapter

    return installed_adapter()(workload.config, connector_class=(module_name, name))


class _GenericDriver(Driver):
    """The driver for a connector whose worker protocol is unknown: loads finish `latency`
    steps after their request started waiting; nothing else is reported."""

    def __init__(self, system: Any, workload: Workload, watch: _Watch) -> None:
        super().__init__(system, workload)
        self.transfers = None
        self.watch = watch

    def _execute(self, step: int, scheduled: Scheduled,
                 drafts_resolved: bool = False) -> RunnerOutput:
        output = self.runner.execute(scheduled, drafts_resolved)
        return replace(output, connector=ConnectorReport(self.watch.loads_due(step)))


def _speaks_simple_offload(connector: Any) -> bool:
    return connector is not None and hasattr(connector, "scheduler_manager")


class _Watch:
    """Wraps the scheduler's connector and checks each call against the contract."""

    def __init__(self, report: ContractReport, scheduler: Any, latency: int) -> None:
        self.report = report
        self.scheduler = scheduler
        self.connector = scheduler.connector
        self.latency = latency
        self.step = 0
        self.promised: dict[str, int] = {}
        self.waiting_since: dict[str, int] = {}

    def violation(self, text: str) -> None:
        self.report.violations.append(f"step {self.step}: {text}")

    def _count(self, name: str) -> None:
        self.report.calls[name] = self.report.calls.get(name, 0) + 1

    def wrap(self) -> None:
        if self.connector is None:
            raise UserError("connector-check: the scheduler built no connector (is prefix "
                            "caching on and the class a KVConnectorBase_V1?)")
        c = self.connector
        match, alloc, update = (c.get_num_new_matched_tokens, c.update_state_after_alloc,
                                c.update_connector_output)

        def matched(request: Any, num_computed: int) -> Any:
            self._count("get_num_new_matched_tokens")
            result = self._guard("get_num_new_matched_tokens", match, request, num_computed)
            tokens = result[0] if isinstance(result, tuple) else None
            self.promised[request.request_id] = tokens or 0
            return result

        def allocated(request: Any, blocks: Any, num_external: int) -> Any:
            self._count("update_state_after_alloc")
            rid = request.request_id
            promised = self.promised.get(rid, 0)
            if num_external > promised:
                self.violation(f"{rid}: update_state_after_alloc told {num_external} external "
                               f"tokens, get_num_new_matched_tokens promised {promised}")
            table = self.scheduler.kv_cache_manager.get_block_ids(rid)
            size = self.scheduler.block_size
            if num_external and len(table[0]) * size < num_external:
                self.violation(f"{rid}: {num_external} external tokens, but its table holds "
                               f"{len(table[0]) * size} token slots")
            return self._guard("update_state_after_alloc", alloc, request, blocks,
                               num_external)

        def output(connector_output: Any) -> Any:
            self._count("update_connector_output")
            for rid in connector_output.finished_recving or ():
                request = self.scheduler.requests.get(rid)
                if request is None:
                    self.violation(f"{rid}: load reported finished for an unknown request")
                elif rid not in self.waiting_since and not request.is_finished():
                    self.violation(f"{rid}: load reported finished, but it never waited")
            return self._guard("update_connector_output", update, connector_output)

        sources = c.get_external_cache_hit_sources

        def split(request: Any, num_external: int) -> Any:
            self._count("get_external_cache_hit_sources")
            result = self._guard("get_external_cache_hit_sources", sources, request,
                                 num_external)
            self.check_split(request.request_id, num_external, result)
            return result

        c.get_num_new_matched_tokens = matched
        c.update_state_after_alloc = allocated
        c.update_connector_output = output
        c.get_external_cache_hit_sources = split

    def check_split(self, rid: str, num_external: int, split: Any) -> None:
        """A split of `num_external` hit tokens by tier: adds up, no empty or negative entry."""
        counts = dict(split)
        if sum(counts.values()) != num_external:
            self.violation(f"{rid}: get_external_cache_hit_sources split {num_external} hit "
                           f"tokens as {_named(counts)} (adds up to {sum(counts.values())}; "
                           "upstream reports them all as external_unspecified)")
        bad = {source: count for source, count in counts.items() if count <= 0}
        if bad:
            self.violation(f"{rid}: get_external_cache_hit_sources has entries with no "
                           f"tokens: {_named(bad)}")

    def _guard(self, name: str, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as err:
            self.violation(f"{type(err).__name__} raised in {name}: {err}")
            raise

    def loads_due(self, step: int) -> tuple[str, ...]:
        """The generic worker's finished loads: requests waiting `latency` steps or more."""
        return tuple(sorted(rid for rid, since in self.waiting_since.items()
                            if step - since >= self.latency))

    def after_step(self, step: int) -> None:
        from vllm.v1.request import RequestStatus

        self.step = step + 1
        # A load reported finished is no longer the connector's: the request then waits for
        # admission (which a preempting step skips), not for its load.
        loaded: set[str] = getattr(self.scheduler, "finished_recving_kv_req_ids", set())
        waiting = {r.request_id for r in self.scheduler.requests.values()
                   if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                   and r.request_id not in loaded}
        for rid in waiting - self.waiting_since.keys():
            self.waiting_since[rid] = step
        for rid in list(self.waiting_since):
            if rid not in waiting:
                del self.waiting_since[rid]
            elif step - self.waiting_since[rid] == self.latency + STALL_PATIENCE:
                self.violation(f"{rid}: waiting for its load for {step - self.waiting_since[rid]}"
                               " steps")

    def final(self) -> None:
        """Once everything finished and drained: no block may still be referenced."""
        if self.scheduler.has_requests():
            return  # the run did not finish: its stall is reported already
        gpu = pool_counts(self.scheduler.kv_cache_manager.block_pool)
        if gpu.active:
            self.violation(f"GPU pool: {gpu.active} blocks still referenced after every "
                           "request finished (leak)")
        manager = getattr(self.connector, "scheduler_manager", None)
        if manager is not None:
            cpu = pool_counts(manager.cpu_block_pool)
            if cpu.active:
                self.violation(f"CPU tier: {cpu.active} blocks still referenced after every "
                               "request finished (leak)")


def _named(counts: dict[Any, int]) -> str:
    return "{" + ", ".join(f"{getattr(source, 'value', source)}: {count}"
                           for source, count in counts.items()) + "}"
