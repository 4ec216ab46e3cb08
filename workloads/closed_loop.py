"""Closed-loop arrivals, the continuum policy's and the KV connector's settings, checked
across records.

A request with `after` arrives a gap after another request finishes, the way an agent's next
turn follows its tool call, so its arrival step depends on the run, not on the file. What the
file can still promise is checked here, with the line of the offending record: the
predecessor exists, the chain has no cycle, gaps convert to steps (the header has `step_ms`),
and the longest prompt the chain can grow to (every predecessor's prompt and `max_tokens`
outputs, then this turn's new tokens) fits `max_model_len`. Each follower gets the earliest
step it could arrive at as its `arrival_step` (predecessor's + 1 + the gap in steps), which
keeps a workload's requests sorted and its step budget (`default_max_steps`) large enough.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.errors import WorkloadError
from workloads.model import (
    ContinuumConfig,
    KVConnectorConfig,
    LoadFailure,
    RequestSpec,
    gap_steps,
)
from workloads.schema import (
    ContinuumModel,
    KVConnectorModel,
    MultiModel,
    NixlModel,
    OffloadingModel,
)

if TYPE_CHECKING:
    from workloads.located import Located


def continuum_config(model: ContinuumModel | None, policy: str, step_ms: float | None,
                     fail: Callable[[str, str], WorkloadError]) -> ContinuumConfig | None:
    """The policy's settings (defaults when the policy is continuum and none are given)."""
    if model is None and policy != "continuum":
        return None
    if step_ms is None:
        raise fail("continuum", "needs 'step_ms' in the header (pins expire after a time)")
    model = model or ContinuumModel()
    return ContinuumConfig(model.ttl_ms, model.estimator, model.threshold_ms, step_ms)


def connector_config(model: KVConnectorModel | OffloadingModel | NixlModel | MultiModel | None,
                     num_groups: int, block_size: int,
                     fail: Callable[[str, str], WorkloadError]) -> KVConnectorConfig | None:
    """The KV connector's settings. Planned load failures name blocks by id, which only one
    KV-cache group makes unambiguous (upstream refuses invalid block ids otherwise); an
    offloaded chunk is a whole number of GPU blocks."""
    if model is None:
        return None
    if isinstance(model, MultiModel):
        kinds = sorted(c.type for c in model.connectors)
        if kinds != ["nixl", "offloading"]:
            raise fail("kv_connector.connectors", "a MultiConnector is modelled for one 'nixl' "
                       f"and one 'offloading' connector (P/D with a CPU tier; got {kinds})")
        parts = tuple(connector_config(c, num_groups, block_size, fail)
                      for c in model.connectors)
        return KVConnectorConfig("multi", connectors=tuple(p for p in parts if p is not None))
    if isinstance(model, OffloadingModel):
        size = model.offloaded_block_size
        if size is not None and size % block_size:
            raise fail("kv_connector.offloaded_block_size", f"{size} is not a multiple of the "
                       f"GPU block size {block_size}")
        return KVConnectorConfig("offloading", load_latency_steps=model.load_latency_steps,
                                 store_latency_steps=model.store_latency_steps,
                                 num_cpu_chunks=model.num_cpu_chunks,
                                 offloaded_block_size=size,
                                 eviction_policy=model.eviction_policy,
                                 store_threshold=model.store_threshold,
                                 offload_prompt_only=model.offload_prompt_only,
                                 self_describing_kv_events=model.self_describing_kv_events,
                                 sync_load_budget_bytes=model.sync_load_budget_bytes)
    if isinstance(model, NixlModel):
        if model.bidirectional and model.transfer_mode == "push":
            raise fail("kv_connector.bidirectional", "upstream's push mode refuses "
                       "bidirectional KV transfer")
        return KVConnectorConfig("nixl", load_failure_policy=model.load_failure_policy,
                                 load_latency_steps=model.load_latency_steps,
                                 send_latency_steps=model.send_latency_steps,
                                 transfer_mode=model.transfer_mode,
                                 bidirectional=model.bidirectional,
                                 recompute_threshold=model.recompute_threshold)
    if model.load_failures and num_groups != 1:
        raise fail("kv_connector.load_failures", "need a single KV-cache group (block ids are "
                   f"per group; this config has {num_groups})")
    return KVConnectorConfig(model.type, model.num_cpu_blocks, model.lazy_offload,
                             model.load_failure_policy, model.load_latency_steps,
                             model.store_latency_steps,
                             tuple(LoadFailure(f.load_event, f.block_index)
                                   for f in model.load_failures), backend=model.backend)


class _Chain:
    """Resolves `after` chains once each (memoised), raising on unknown ids and cycles."""

    def __init__(self, built: Mapping[str, Located[RequestSpec]], step_ms: float | None,
                 max_model_len: int, source: str | Path) -> None:
        self.built = built
        self.step_ms = step_ms
        self.max_model_len = max_model_len
        self.source = source
        self.done: dict[str, tuple[int, int]] = {}  # id -> (earliest arrival, longest prompt)

    def resolve(self, rid: str, visiting: tuple[str, ...] = ()) -> tuple[int, int]:
        if rid in self.done:
            return self.done[rid]
        item = self.built[rid]
        after = item.record.after
        if after is None:
            found = (item.record.arrival_step, item.record.prompt_len)
            self.done[rid] = found
            return found
        fail = self._fail(item.line)
        if after.request_id not in self.built:
            raise fail("after.request_id", f"request {rid!r} follows unknown request "
                       f"{after.request_id!r}")
        if after.request_id == rid or after.request_id in visiting:
            cycle = " -> ".join((*visiting, rid, after.request_id))
            raise fail("after.request_id", f"arrival cycle: {cycle}")
        if self.step_ms is None:
            raise fail("after", "needs 'step_ms' in the header to convert gap_ms to steps")
        before = self.built[after.request_id].record
        arrival, longest = self.resolve(after.request_id, (*visiting, rid))
        prompt = longest + before.max_tokens + item.record.prompt_len
        if prompt > self.max_model_len:
            raise fail("prompt", f"request {rid!r}: its prompt can grow to {prompt} tokens "
                       f"(predecessors' prompts and outputs plus its own), more than "
                       f"config.max_model_len {self.max_model_len}")
        found = (arrival + 1 + gap_steps(after.gap_ms, self.step_ms), prompt)
        self.done[rid] = found
        return found

    def _fail(self, line: int) -> Callable[[str, str], WorkloadError]:
        def fail(field: str, problem: str) -> WorkloadError:
            return WorkloadError(self.source, line, field, problem)
        return fail


def resolve_arrivals(built: dict[str, Located[RequestSpec]], step_ms: float | None,
                     max_model_len: int, source: str | Path) -> None:
    """Give every `after` request its earliest arrival step, in place (see module doc)."""
    chain = _Chain(built, step_ms, max_model_len, source)
    for rid, item in list(built.items()):
        if item.record.after is not None:
            arrival, _ = chain.resolve(rid)
            built[rid] = dataclasses.replace(
                item, record=dataclasses.replace(item.record, arrival_step=arrival))

