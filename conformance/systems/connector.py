"""Translating a KV connector between the canonical records and each system's own objects.

The twin's `OffloadMetadata` and upstream's `SimpleCPUOffloadMetadata` share their field
names, so one reader serves both. The worker's report goes back as each side's native
output; upstream gets `finished_recving` as a set that iterates in sorted order, because
upstream walks that set to free pins and a plain set's order would depend on string hashing
(PYTHONHASHSEED), which the harness does not let decide a block's place in an LRU queue.
"""

from __future__ import annotations

from typing import Any

from conformance.systems.protocol import BlockCounts, ConnectorReport, Transfers
from vtwin.errors import UserError
from workloads.model import EngineConfig


def transfers_of(meta: Any) -> Transfers | None:
    """The canonical transfers of a step's connector metadata (None: no metadata)."""
    if meta is None or not hasattr(meta, "load_gpu_blocks"):
        return None  # no connector, or one whose metadata is not SimpleCPUOffload's
    return Transfers(
        load_event=meta.load_event,
        load_blocks=tuple(zip(meta.load_gpu_blocks, meta.load_cpu_blocks, strict=True)),
        store_event=meta.store_event,
        store_blocks=tuple(zip(meta.store_gpu_blocks, meta.store_cpu_blocks, strict=True)),
        load_event_to_reqs=tuple((e, tuple(r)) for e, r in sorted(
            meta.load_event_to_reqs.items())),
        need_flush=bool(meta.need_flush),
    )


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


def upstream_connector_output(report: ConnectorReport) -> Any:
    """Upstream's `KVConnectorOutput` for the worker's report (SimpleCPUOffload's worker
    reports finished stores in its worker metadata, one count per event)."""
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

    meta = (SimpleCPUOffloadWorkerMetadata({e: 1 for e in report.finished_stores})
            if report.finished_stores else None)
    return KVConnectorOutput(
        finished_recving=SortedSet(report.finished_loads) or None,
        invalid_block_ids=set(report.invalid_block_ids),
        kv_connector_worker_meta=meta,
    )


def impl_connector_output(report: ConnectorReport) -> Any:
    from impl.connector.types import KVConnectorOutput

    return KVConnectorOutput(finished_recving=frozenset(report.finished_loads),
                             completed_store_events=tuple((e, 1) for e in
                                                          report.finished_stores),
                             invalid_block_ids=frozenset(report.invalid_block_ids))


def offload_settings(config: EngineConfig) -> Any:
    """The twin's `OffloadSettings` (None: no connector)."""
    from impl.connector.types import OffloadSettings

    c = config.kv_connector
    if c is None:
        return None
    return OffloadSettings(c.num_cpu_blocks, c.lazy_offload, c.load_failure_policy)


def upstream_transfer_config(config: EngineConfig,
                             connector_class: tuple[str, str] | None = None) -> Any:
    """Upstream's `KVTransferConfig` for SimpleCPUOffloadConnector, or for the plugged
    `connector_class` (module, class: `vtwin connector-check`). The CPU pool's size comes
    from a byte budget over the GPU cache's size: `kv_cache_tensors_for` gives the GPU cache
    one byte per block, so `num_cpu_blocks` bytes make exactly that many CPU blocks."""
    from vllm.config import KVTransferConfig

    c = config.kv_connector
    if c is None:
        return None
    if c.type != "simple_cpu_offload":
        raise UserError(f"kv_connector.type {c.type!r}: only 'simple_cpu_offload' is driven")
    module, name = connector_class or (None, "SimpleCPUOffloadConnector")
    return KVTransferConfig(
        kv_connector=name, kv_connector_module_path=module, kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": c.num_cpu_blocks,
                                   "lazy_offload": c.lazy_offload},
        kv_load_failure_policy=c.load_failure_policy)


def kv_cache_tensors_for(config: EngineConfig) -> list[Any]:
    """One backing allocation of one byte per block (see `upstream_transfer_config`); the
    scheduler never reads it, the offload tier sizes itself from it."""
    if config.kv_connector is None:
        return []
    from vllm.v1.kv_cache_interface import KVCacheTensor

    layers = [f"layer{i}" for i in range(len(config.kv_cache_groups))]
    return [KVCacheTensor(size=config.num_blocks, layers=layers, layer_stride=1,
                          block_stride=1)]
