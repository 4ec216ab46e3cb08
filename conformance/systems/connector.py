"""Translating a KV connector between the canonical records and each system's own objects.

Three connectors: upstream's SimpleCPUOffloadConnector (`simple_cpu_offload`), its
OffloadingConnector (`offloading`) and its NIXL prefill/decode connector (`nixl`, pull mode;
`conformance.systems.pd` builds its per-request parameters). The twin's `OffloadMetadata` and
upstream's `SimpleCPUOffloadMetadata` share their field names, so one reader serves both; so
do the twin's `OffloadingMetadata` and upstream's `OffloadingConnectorMetadata`, up to how
each spells a job's GPU and CPU sides, and the two NIXL metadata, up to a pull's fields. The
worker's report goes back as each side's native
output; upstream gets `finished_recving` as a set that iterates in sorted order, because
upstream walks that set to free pins and a plain set's order would depend on string hashing
(PYTHONHASHSEED), which the harness does not let decide a block's place in an LRU queue.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.systems.protocol import BlockCounts
from conformance.systems.transfer_records import (
    BlockIds,
    ConnectorReport,
    JobTransfers,
    OffloadJob,
    PullOrder,
    RemoteTransfers,
    Transfers,
)
from vtwin.errors import UserError
from workloads.model import EngineConfig, KVConnectorConfig


def connector_parts(meta: Any) -> tuple[Any, ...]:
    """A step's metadata per connector: a MultiConnector's parts (the twin's `MultiMetadata`
    and upstream's `MultiKVConnectorMetadata` both keep them in `metadata`), else the one."""
    parts = getattr(meta, "metadata", None)
    return tuple(parts) if isinstance(parts, tuple) else (meta,)


def split_transfers(meta: Any) -> tuple[Transfers | None, JobTransfers | None]:
    """`Scheduled`'s `transfers` and `jobs` for a step's connector metadata (at most one; a
    MultiConnector's P/D part is `remote_transfers_of`'s)."""
    parts = connector_parts(meta)
    found = next((t for t in map(transfers_of, parts) if t is not None), None)
    if isinstance(found, JobTransfers):
        return None, found
    return found, None


def remote_transfers_of(meta: Any) -> RemoteTransfers | None:
    """A P/D connector's orders (None: another connector's metadata, or none). The twin's
    `NixlMetadata` and upstream's `NixlConnectorMetadata` share the field names; a pull's
    fields differ (`num_cached_blocks` / `local_num_computed_blocks`, `awaiting` /
    `awaiting_kvs`)."""
    meta = next((m for m in connector_parts(meta) if hasattr(m, "reqs_to_recv")), None)
    if meta is None:
        return None
    pulls = []
    for rid, order in meta.reqs_to_recv.items():
        cached = getattr(order, "num_cached_blocks", None)
        if cached is None:
            cached = order.local_num_computed_blocks
        awaiting = getattr(order, "awaiting", None)
        if awaiting is None:
            awaiting = order.awaiting_kvs
        pulls.append(PullOrder(rid, tuple(tuple(int(b) for b in g)
                                          for g in order.local_block_ids),
                               tuple(int(n) for n in cached), bool(awaiting)))
    # Push mode: upstream's registrations are dicts naming the local blocks among the
    # decode side's address (configuration, not compared); the twin's are the blocks.
    registrations = tuple(
        (rid, _block_ids(reg["local_block_ids"] if isinstance(reg, dict) else reg))
        for rid, reg in (getattr(meta, "push_registrations", None) or {}).items())
    pushes = tuple((rid, _block_ids(blocks)) for rid, blocks in (
        getattr(meta, "push_finished_blocks", None) or {}).items())
    return RemoteTransfers(tuple(pulls), tuple(meta.reqs_to_send),
                           tuple(sorted(meta.reqs_in_batch)),
                           tuple(sorted(meta.reqs_not_processed)), registrations, pushes)


def _block_ids(groups: Any) -> BlockIds:
    return tuple(tuple(int(b) for b in g) for g in groups)


def transfers_of(meta: Any) -> Transfers | JobTransfers | None:
    """The canonical transfers of a step's connector metadata (None: no metadata)."""
    if meta is None:
        return None
    if hasattr(meta, "load_jobs"):
        return JobTransfers(
            tuple(_job(job_id, job, load=True) for job_id, job in meta.load_jobs.items()),
            tuple(_job(job_id, job, load=False) for job_id, job in meta.store_jobs.items()),
            tuple(sorted(meta.jobs_to_flush or ())))
    if not hasattr(meta, "load_gpu_blocks"):
        return None  # a connector whose metadata is neither
    return Transfers(
        load_event=meta.load_event,
        load_blocks=tuple(zip(meta.load_gpu_blocks, meta.load_cpu_blocks, strict=True)),
        store_event=meta.store_event,
        store_blocks=tuple(zip(meta.store_gpu_blocks, meta.store_cpu_blocks, strict=True)),
        load_event_to_reqs=tuple((e, tuple(r)) for e, r in sorted(
            meta.load_event_to_reqs.items())),
        need_flush=bool(meta.need_flush),
    )


def _job(job_id: int, job: Any, *, load: bool) -> OffloadJob:
    """A job of either side: the twin's carries `gpu` and `cpu_slots`; upstream's carries a
    GPU spec and a CPU spec as `src_spec` / `dst_spec` (GPU -> CPU for a store). `sync`: a
    load finished within its step (0.33's jobs carry the flag; 0.32's jobs have none)."""
    if hasattr(job, "gpu"):
        gpu = job.gpu
        return OffloadJob(job_id, job.req_id, gpu.block_ids, gpu.group_sizes,
                          gpu.block_indices, job.cpu_slots, sync=job.sync)
    gpu, cpu = (job.dst_spec, job.src_spec) if load else (job.src_spec, job.dst_spec)
    return OffloadJob(job_id, job.req_id, tuple(int(b) for b in gpu.block_ids),
                      tuple(int(n) for n in gpu.group_sizes),
                      tuple(int(i) for i in gpu.block_indices),
                      tuple(int(b) for b in cpu.block_ids),
                      sync=bool(getattr(job, "sync", False)))


def pool_counts(pool: Any) -> BlockCounts:
    """(active, cached, empty) of a block pool by a walk, the null block left out (a one-off
    check; a run keeps the counts as the pools change). `_block_hash` on upstream's blocks,
    `block_hash` on the twin's."""
    free = pool.get_num_free_blocks()
    field = "_block_hash" if hasattr(pool.blocks[0], "_block_hash") else "block_hash"
    cached = sum(1 for b in pool.blocks if b.ref_cnt == 0 and not b.is_null
                 and getattr(b, field) is not None)
    return BlockCounts(len(pool.blocks) - 1 - free, cached, free - cached)


class SortedSet(set[str]):
    """A set that iterates in sorted order (see the module docstring)."""

    def __iter__(self) -> Any:
        return iter(sorted(set.__iter__(self)))


def upstream_connector_output(report: ConnectorReport,
                              layout: tuple[str, ...] = (), workers: int = 1) -> Any:
    """Upstream's `KVConnectorOutput` for the worker's report. SimpleCPUOffload's worker
    reports finished stores in its worker metadata, the OffloadingConnector's every finished
    job, as the engine merges them from its `workers` ranks (DCP's: one count from each, and
    upstream waits for all of them). Under a
    MultiConnector (`layout`: its connectors' types, in order) the worker metadata is one slot
    per connector, the OffloadingConnector's in its place."""
    from vllm.v1.outputs import KVConnectorOutput

    meta: Any = None
    if report.completed_jobs:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata,
        )

        meta = OffloadingWorkerMetadata(completed_jobs={j: workers for j in report.completed_jobs})
    elif report.finished_stores:
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

        meta = SimpleCPUOffloadWorkerMetadata({e: workers for e in report.finished_stores})
    if layout and meta is not None:
        from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import (
            MultiKVConnectorWorkerMetadata,
        )

        meta = MultiKVConnectorWorkerMetadata(
            metadata=tuple(meta if kind == "offloading" else None for kind in layout))
    # Releases before whole-pull failures existed (0.19.1) have no `failed_recving`: it is
    # passed only when a pull failed.
    failed = {"failed_recving": SortedSet(report.failed_loads)} if report.failed_loads else {}
    return KVConnectorOutput(
        finished_recving=SortedSet(report.finished_loads) or None,
        finished_sending=SortedSet(report.finished_sends) or None,
        invalid_block_ids=set(report.invalid_block_ids),
        kv_connector_worker_meta=meta,
        **failed,
    )


def impl_connector_output(report: ConnectorReport) -> Any:
    from impl.connector.types import KVConnectorOutput

    return KVConnectorOutput(finished_recving=frozenset(report.finished_loads),
                             completed_store_events=tuple((e, 1) for e in
                                                          report.finished_stores),
                             completed_jobs=tuple((j, 1) for j in report.completed_jobs),
                             invalid_block_ids=frozenset(report.invalid_block_ids),
                             finished_sending=frozenset(report.finished_sends),
                             failed_recving=frozenset(report.failed_loads))


def offload_settings(config: EngineConfig) -> Any:
    """The twin's `OffloadSettings` or `OffloadingSettings` (None: no connector)."""
    from impl.connector.types import (
        MultiSettings,
        NixlSettings,
        OffloadingSettings,
        OffloadSettings,
    )

    c = config.kv_connector
    if c is None:
        return None
    if c.type == "multi":
        return MultiSettings(tuple(offload_settings(replace(config, kv_connector=part))
                                   for part in c.connectors))
    if c.type == "nixl":
        return NixlSettings(c.load_failure_policy, c.transfer_mode, c.bidirectional,
                            c.recompute_threshold)
    if c.type == "offloading":
        return OffloadingSettings(c.num_cpu_chunks, blocks_per_chunk(config),
                                  c.eviction_policy, c.store_threshold,
                                  offload_prompt_only=c.offload_prompt_only,
                                  self_describing_kv_events=c.self_describing_kv_events,
                                  sync_load_budget_bytes=c.sync_load_budget_bytes)
    return OffloadSettings(c.num_cpu_blocks, c.lazy_offload, c.load_failure_policy, c.backend)


def blocks_per_chunk(config: EngineConfig) -> int:
    """GPU blocks per offloaded chunk: the workload's offloaded block size over the GPU's (the
    workload checks make it a whole number)."""
    c = None if config.kv_connector is None else config.kv_connector.part("offloading")
    assert c is not None
    return 1 if c.offloaded_block_size is None else c.offloaded_block_size // config.block_size


def upstream_transfer_config(config: EngineConfig,
                             connector_class: tuple[str, str] | None = None) -> Any:
    """Upstream's `KVTransferConfig` for the workload's connector, or for the plugged
    `connector_class` (module, class: `vtwin connector-check`). Both size their CPU tier from a
    byte budget over the GPU cache's size: `kv_cache_tensors_for` gives the GPU cache one byte
    per block, so `num_cpu_blocks` bytes make exactly that many CPU blocks for
    SimpleCPUOffload, and the OffloadingConnector, which pads each chunk's bytes up to its
    buffer alignment, gets that padded size times `num_cpu_chunks`."""
    from vllm.config import KVTransferConfig

    c = config.kv_connector
    if c is None:
        return None
    if c.type == "multi":
        from conformance.systems.pd import upstream_multi_config

        return upstream_multi_config(c, {"kv_connector": "OffloadingConnector",
                                         "kv_role": "kv_both",
                                         "kv_connector_extra_config": _offloading_extra(config)})
    if c.type == "offloading":
        module, name = connector_class or (None, "OffloadingConnector")
        return KVTransferConfig(kv_connector=name, kv_connector_module_path=module,
                                kv_role="kv_both",
                                kv_connector_extra_config=_offloading_extra(config))
    if c.type == "nixl":
        from conformance.systems.pd import upstream_nixl_config

        return upstream_nixl_config(c, connector_class)
    if c.type != "simple_cpu_offload":
        raise UserError(f"kv_connector.type {c.type!r}: not a connector the harness drives")
    module, name = connector_class or (None, "SimpleCPUOffloadConnector")
    dcp_ranks = config.decode_context_parallel_size
    return KVTransferConfig(
        kv_connector=name, kv_connector_module_path=module, kv_role="kv_both",
        # Server-wide bytes, split over the ranks (DCP's, which reuse the TP ranks).
        kv_connector_extra_config={"cpu_bytes_to_use": c.num_cpu_blocks * dcp_ranks,
                                   "lazy_offload": c.lazy_offload, **_disk_extra(c)},
        kv_load_failure_policy=c.load_failure_policy)


def _disk_extra(c: KVConnectorConfig) -> dict[str, Any]:
    """The disk backend's keys: its pool sized by the disk budget (one byte per block, as the
    CPU budget). The scheduler side never opens `disk_path` (the worker writes there)."""
    if c.backend != "disk":
        return {}
    return {"kv_offload_backend": "disk", "disk_capacity_bytes": c.num_cpu_blocks,
            "disk_path": str(Path(tempfile.gettempdir()) / "vtwin-disk-tier")}


def _offloading_extra(config: EngineConfig) -> dict[str, Any]:
    """The OffloadingConnector's extra config (see `upstream_transfer_config`)."""
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    c = None if config.kv_connector is None else config.kv_connector.part("offloading")
    assert c is not None
    align = CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
    chunk_bytes = -(-blocks_per_chunk(config) // align) * align
    return {"cpu_bytes_to_use": c.num_cpu_chunks * chunk_bytes,
            "blocks_per_chunk": blocks_per_chunk(config),
            "eviction_policy": c.eviction_policy,
            "store_threshold": c.store_threshold,
            "offload_prompt_only": c.offload_prompt_only,
            "self_describing_kv_events": c.self_describing_kv_events,
            # (0.32 reads no such key; 0.33 loads hits within the budget in the step)
            **({"sync_load_budget_bytes": c.sync_load_budget_bytes}
               if c.sync_load_budget_bytes else {})}


def kv_cache_tensors_for(config: EngineConfig) -> list[Any]:
    """One backing allocation of one byte per block (see `upstream_transfer_config`); the
    scheduler never reads it, the offload tier sizes itself from it."""
    if config.kv_connector is None:
        return []
    from vllm.v1.kv_cache_interface import KVCacheTensor

    layers = [f"layer{i}" for i in range(len(config.kv_cache_groups))]
    return [KVCacheTensor(size=config.num_blocks, layers=layers, layer_stride=1,
                          block_stride=1)]
