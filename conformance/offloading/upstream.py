"""`UpstreamOffloadManager`: the installed vLLM's `CPUOffloadingManager` behind the
`OffloadManagerSystem` interface (its own objects and methods; nothing copied)."""

from __future__ import annotations

from typing import Any

from conformance.offloading.systems import (
    CatalogueEntry,
    EventRecord,
    ManagerShape,
    PolicyOrder,
    StoreAnswer,
)
from impl.connector.offloading.keys import OffloadStats

USAGE = "vllm:kv_offload_cpu_cache_usage_perc"
WRITE_USAGE = "vllm:kv_offload_cpu_cache_write_usage_perc"
READ_USAGE = "vllm:kv_offload_cpu_cache_read_usage_perc"
ALLOCATION_SIZE = "vllm:kv_offload_cpu_allocation_size"
STORES_SKIPPED = "vllm:kv_offload_stores_skipped"


class UpstreamOffloadManager:
    def __init__(self, shape: ManagerShape, name: str = "upstream") -> None:
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

        self.name = name
        self.manager = CPUOffloadingManager(
            shape.num_chunks, cache_policy=shape.policy, enable_events=True,
            store_threshold=shape.store_threshold, max_tracker_size=shape.max_tracker_size)
        self.contexts: dict[str, Any] = {}

    def new_request(self, request_id: str) -> None:
        from vllm.v1.kv_offload.base import ReqContext

        self.contexts[request_id] = ReqContext(req_id=request_id)
        self.manager.on_new_request(self.contexts[request_id])

    def set_position(self, request_id: str, key: bytes, end_token: int) -> None:
        self.contexts[request_id].set_offload_key_position(key, end_token)

    def lookup(self, key: bytes) -> str:
        from vllm.v1.kv_offload.base import ReqContext

        return str(self.manager.lookup(key, ReqContext(req_id="lookup")).name.lower())

    def prepare_load(self, request_id: str, keys: list[bytes]) -> list[int]:
        spec = self.manager.prepare_load(keys, self.contexts[request_id])
        return [int(i) for i in spec.block_ids]

    def complete_load(self, request_id: str, keys: list[bytes]) -> None:
        self.manager.complete_load(keys, self.contexts[request_id])

    def touch(self, request_id: str, keys: list[bytes]) -> None:
        self.manager.touch(keys, self.contexts[request_id])

    def prepare_store(self, request_id: str, keys: list[bytes]) -> StoreAnswer:
        out = self.manager.prepare_store(keys, self.contexts[request_id])
        if out is None:
            return None
        return (tuple(out.keys_to_store), tuple(int(i) for i in out.store_spec.block_ids),
                tuple(out.evicted_keys))

    def complete_store(self, request_id: str, keys: list[bytes], success: bool) -> None:
        self.manager.complete_store(keys, self.contexts[request_id], success=success)

    def finish(self, request_id: str) -> None:
        self.manager.on_request_finished(self.contexts[request_id])

    def reset_cache(self) -> None:
        self.manager.reset_cache()

    def take_events(self) -> list[EventRecord]:
        return [(tuple(e.keys), bool(e.removed), bool(getattr(e, "metadata_only", False)))
                for e in self.manager.take_events()]

    def stats(self) -> OffloadStats:
        stats = self.manager.get_stats()
        values: dict[str, Any] = stats.data.get("data", {})
        return OffloadStats(
            float(metric_value(values, USAGE)), float(metric_value(values, WRITE_USAGE)),
            float(metric_value(values, READ_USAGE)),
            tuple(int(v) for v in metric_value(values, ALLOCATION_SIZE, [])),
            None if self.manager.store_threshold < 2
            else int(metric_value(values, STORES_SKIPPED, 0)))

    def catalogue(self, keys: list[bytes]) -> dict[bytes, CatalogueEntry]:
        found = {}
        for key in keys:
            chunk = self.manager._policy.get(key)
            if chunk is not None:
                found[key] = (int(chunk.chunk_id), int(chunk.ref_cnt))
        return found

    def policy_order(self) -> PolicyOrder:
        policy = self.manager._policy
        if hasattr(policy, "t1"):  # ARC
            return ((tuple(policy.t1), tuple(policy.t2), tuple(policy.b1), tuple(policy.b2)),
                    float(policy.target_t1_size))
        ranks = policy._ranks
        return ((tuple(sorted(ranks, key=lambda key: (ranks[key], key))),), 0.0)

    def check_integrity(self) -> None:
        return  # upstream keeps no integrity check of its own


def metric_value(values: dict[str, Any], name: str, default: Any = 0.0) -> Any:
    """A metric's value without labels (the CPU manager labels none); `default` if unset."""
    return values.get(name, {}).get((), default)
