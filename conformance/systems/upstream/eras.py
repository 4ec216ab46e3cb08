"""The upstream API eras after the first: each a subclass of `UpstreamSystem` that names its
versions in `VERSIONS` and overrides only what changed, and `adapter_for`, which picks the era
of an installed vLLM (a worker process runs each release in its own environment, see
`conformance.systems.remote`)."""

from __future__ import annotations

from typing import Any

from conformance.systems.upstream.capabilities import SCHEDULER_MEMBERS
from conformance.systems.upstream.system import UpstreamSystem
from vtwin.errors import UserError


class Upstream033System(UpstreamSystem):
    """The 0.33 era: the 0.32 adapter but for a data-parallel rank (0.33 moved options the
    harness does not set; its mamba manager wants cache mode 'align' with prefix caching, a
    twin matter)."""

    VERSIONS = ("0.33.",)

    def as_data_parallel_rank(self) -> None:
        """0.33 applies `prefill_schedule_interval` in the engine itself unless it is a rank of
        a data-parallel deployment, whose engine core throttles it instead: the scheduler
        decides that from the parallel config, which a one-process oracle cannot have, so its
        local interval is set as such a rank's is."""
        super().as_data_parallel_rank()
        self.scheduler.local_prefill_interval = 1


class Upstream019System(UpstreamSystem):
    """The 0.19 era: no hash block size apart from the block size (neither `KVCacheConfig`
    nor the scheduler takes one: `capabilities.honour` leaves it out, and refuses a workload
    that sets another), no `kv_holding_waiting` (its skipped requests wait in
    `skipped_waiting`), no KV connector driven."""

    VERSIONS = ("0.19.",)

    MEMBERS = (*SCHEDULER_MEMBERS, "skipped_waiting")

    def cache_arguments(self) -> dict[str, Any]:
        if self.config.kv_connector is not None:
            raise UserError("kv_connector: the 0.19 adapter does not drive a KV connector "
                            "(its offload tier is not checked against this harness); compare "
                            "offload workloads with vllm==0.32.0 or 0.33.0")
        return super().cache_arguments()

    def waiting_queues(self) -> tuple[Any, ...]:
        return (self.scheduler.skipped_waiting, self.scheduler.waiting)


ERAS: tuple[type[UpstreamSystem], ...] = (UpstreamSystem, Upstream033System, Upstream019System)


def adapter_for(version: str) -> type[UpstreamSystem]:
    """The adapter class of the era `version` belongs to (a `UserError` if none does)."""
    for era in ERAS:
        if version.startswith(era.VERSIONS):
            return era
    known = ", ".join(f"{v}x" for era in ERAS for v in era.VERSIONS)
    raise UserError(f"no upstream adapter for vLLM {version} (eras: {known})")


def installed_adapter() -> type[UpstreamSystem]:
    """The adapter of the vLLM importable in this process."""
    from vllm import __version__ as version

    return adapter_for(version)
