"""`SimpleCPUOffloadScheduler`: the scheduler side of the CPU offload tier (seed 003).

The CPU tier is a second `BlockPool` (built by a coordinator over the GPU's KV-cache groups,
`num_cpu_blocks` long, prefix caching always on) holding copies of GPU blocks under the same
hashes. Two flows cross it:

* **Loads.** At admission, after the local (GPU) prefix hit, `get_num_new_matched_tokens` looks
  the rest of the prompt's hashes up in the CPU pool and pins what it finds. Once the scheduler
  has allocated GPU blocks for those tokens, `update_state_after_alloc` pairs each CPU block
  with its GPU destination and pins both until the worker reports the load done (by request).
  Loads are always asynchronous: the request waits (WAITING_FOR_REMOTE_KVS) meanwhile.
* **Stores.** Eager mode copies every block a request confirms (computed and hashed) as soon as
  the scheduler has seen it computed; lazy mode walks the GPU free queue from a cursor and
  copies cached blocks before the allocator would evict them. A store pins its GPU source and
  CPU destination; when the worker reports the store event done, the CPU block takes the GPU
  block's hash (it becomes findable) and both pins drop, so the CPU copy joins the CPU LRU.

An operator's reset of the tier abandons the transfers in flight and empties the CPU pool's
prefix cache once nothing is abandoned (`impl.connector.offload_reset`).

With KV events on, the tier announces its copies (stored when a store completes, removed when
the CPU pool evicts one) with medium "CPU" (`impl.connector.offload_events`).

Every pin is a plain reference on a block, so the pools' own invariants (`check_integrity`)
cover the connector's bookkeeping too: `check_integrity` here adds the holders it knows about.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from impl.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from impl.connector.offload_events import on_tier
from impl.connector.offload_lazy import lazy_target_blocks
from impl.connector.offload_reset import OffloadTransfers
from impl.connector.offload_state import (
    CPUHit,
    LoadState,
    StoreState,
    Transfer,
    free_hit,
    hit_view,
)
from impl.connector.types import NO_EVENT, KVConnectorOutput, OffloadMetadata, OffloadSettings
from impl.core.block_pool import BlockPool
from impl.core.coordinator import get_kv_cache_coordinator
from impl.core.kv_cache_manager import KVCacheBlocks
from impl.core.prefix_stats import CacheHitSource, single_source
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    MambaSpec,
)
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.core.events import KVCacheEvent
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


class SimpleCPUOffloadScheduler(OffloadTransfers):
    completes_lagging_groups = False  # (`SchedulerConnector`)
    def __init__(self, settings: OffloadSettings, kv_cache_config: KVCacheConfig, *,
                 hash_block_size: int, max_num_batched_tokens: int,
                 use_eagle: bool = False, enable_events: bool = False,
                 behaviour: Behaviour = DEFAULT_BEHAVIOUR,
                 num_reprefillable_tokens: int = 0) -> None:
        super().__init__()
        self.settings = settings
        self.enable_events = enable_events
        self.medium = settings.medium
        # Attention chunk sizes of chunked-local groups (`offload_lookup_chunk_aligned`).
        self.chunk_sizes = tuple(g.kv_cache_spec.attention_chunk_size
                                 for g in kv_cache_config.kv_cache_groups
                                 if isinstance(g.kv_cache_spec, ChunkedLocalAttentionSpec)
                                 ) if behaviour.offload_lookup_chunk_aligned else ()
        # The GPU's groups, retention and DCP ranks (under DCP a mamba state as wide as the
        # hash block makes hits end inside a block on the CPU too), at the CPU pool's size.
        cpu_config = replace(kv_cache_config, num_blocks=settings.num_cpu_blocks)
        # With EAGLE's block drop, a CPU hit gives up its last block as a GPU hit does.
        self.cpu_coordinator = get_kv_cache_coordinator(
            cpu_config, enable_caching=True, hash_block_size=hash_block_size,
            enable_kv_cache_events=enable_events, use_eagle=use_eagle)
        # (a chain of MTP modules: its last tokens are not final, on the CPU as on the GPU)
        self.cpu_coordinator.num_reprefillable_tokens = num_reprefillable_tokens
        if settings.lazy_offload:  # (eager: hits on hash boundaries, as on the GPU)
            self.cpu_coordinator.turn_off_sub_block_hits()
        self.cpu_block_pool: BlockPool = self.cpu_coordinator.block_pool
        self.block_size = self.cpu_coordinator.scheduler_block_size
        self.hash_block_size = hash_block_size
        self.group_block_sizes = [g.kv_cache_spec.block_size
                                  for g in kv_cache_config.kv_cache_groups]
        full = [i for i, g in enumerate(kv_cache_config.kv_cache_groups)
                if isinstance(g.kv_cache_spec, FullAttentionSpec)]
        if not full:
            raise ValueError("kv_connector: the CPU offload tier matches prefixes on a "
                             "full-attention group; this config has none")
        self.fa_group = full[0]
        self.lazy = settings.lazy_offload
        self.target_free = (lazy_target_blocks(kv_cache_config, max_num_batched_tokens)
                            if self.lazy else 0)
        self.load_event_counter = 0

    # -- loads ------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int, bool]:
        """Tokens past the local hit the CPU pool holds, and whether they load asynchronously
        (always, when there are any). The blocks found are pinned until the matching
        `update_state_after_alloc` (a retry first drops the previous pin). The last prompt
        token is never a hit: the scheduler must compute it to sample."""
        stale = self.pending_hits.pop(request.request_id, None)
        if stale is not None:
            free_hit(self.cpu_block_pool, stale)
        if request.skip_reading_prefix_cache or num_computed_tokens % self.block_size:
            return 0, False
        if any(num_computed_tokens % size for size in self.chunk_sizes):
            return 0, False  # the suffix's chunk boundaries would not be the absolute ones
        remaining = request.block_hashes[num_computed_tokens // self.hash_block_size:]
        max_hit = request.num_tokens - 1 - num_computed_tokens
        if not remaining or max_hit <= 0:
            return 0, False
        blocks, hit = self.cpu_coordinator.find_longest_cache_hit(hit_view(remaining), max_hit)
        if hit <= 0:
            return 0, False
        self.cpu_block_pool.touch([b for group in blocks for b in group if not b.is_null])
        self.pending_hits[request.request_id] = CPUHit(blocks, num_computed_tokens)
        return hit, True

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        """Register the request for eager stores; if the scheduler took an external hit, pair
        its first `num_external_tokens` worth of CPU blocks with the GPU blocks just allocated
        after the local hit, and pin both for the load."""
        req_id = request.request_id
        gpu_ids_by_group = blocks.get_block_ids()
        if not self.lazy and req_id not in self.reqs_to_store:
            self.reqs_to_store[req_id] = StoreState(
                request, tuple([] for _ in gpu_ids_by_group), [0] * len(gpu_ids_by_group))
        pending = self.pending_hits.pop(req_id, None)
        if pending is None:
            return
        if num_external_tokens == 0:
            free_hit(self.cpu_block_pool, pending)
            return
        gpu_ids: list[int] = []
        cpu_blocks = []
        for group, cpu_group in enumerate(pending.blocks):
            size = self.group_block_sizes[group]
            taken = cpu_group[:-(-num_external_tokens // size)]
            start = pending.num_computed_tokens // size
            for index, cpu_block in enumerate(taken):
                if cpu_block.is_null:
                    continue
                gpu_ids.append(gpu_ids_by_group[group][start + index])
                cpu_blocks.append(cpu_block)
        self.cpu_block_pool.touch(cpu_blocks)
        free_hit(self.cpu_block_pool, pending)
        gpu_pool = self.gpu_pool
        gpu_pool.touch([gpu_pool.blocks[i] for i in gpu_ids])
        self.reqs_to_load[req_id] = LoadState(
            request, Transfer(gpu_ids, [b.block_id for b in cpu_blocks]))

    def build_connector_meta(self, output: SchedulerOutput) -> OffloadMetadata:
        """This step's store event (blocks chosen now, plus stores queued by finished
        requests) and load event (every registered load not yet sent)."""
        meta = OffloadMetadata(need_flush=bool(output.preempted_req_ids))
        store = self.prepare_stores(output)
        for queued in self.pending_finished_stores:
            store.gpu_block_ids.extend(queued.gpu_block_ids)
            store.cpu_block_ids.extend(queued.cpu_block_ids)
            if store.block_meta is not None and queued.block_meta is not None:
                store.block_meta.extend(queued.block_meta)
        self.pending_finished_stores.clear()
        if store.gpu_block_ids:
            meta.store_event = event = self.store_event_counter
            self.store_event_counter += 1
            self.store_event_to_blocks[event] = Transfer(store.gpu_block_ids,
                                                         store.cpu_block_ids, store.block_meta)
            if store.req_ids:
                self.store_event_to_reqs[event] = store.req_ids
                for req_id in store.req_ids:
                    state = self.reqs_to_store.get(req_id)
                    if state is not None:
                        state.store_events.add(event)
            meta.store_gpu_blocks = store.gpu_block_ids
            meta.store_cpu_blocks = store.cpu_block_ids
        new_loads = [(req_id, load) for req_id, load in self.reqs_to_load.items()
                     if load.load_event is None]
        if new_loads:
            meta.load_event = event = self.load_event_counter
            self.load_event_counter += 1
            for _, load in new_loads:
                load.load_event = event
                meta.load_gpu_blocks.extend(load.transfer.gpu_block_ids)
                meta.load_cpu_blocks.extend(load.transfer.cpu_block_ids)
            self.load_event_to_reqs[event] = [req_id for req_id, _ in new_loads]
        meta.load_event_to_reqs = {e: list(r) for e, r in self.load_event_to_reqs.items()}
        return meta

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """Finished loads release their pins (by request); finished store events publish their
        CPU copies (one worker: a single report completes an event)."""
        for req_id in sorted(output.finished_recving):
            self.cleanup_load(req_id)
        for event, _count in output.completed_store_events:
            self.process_store_event(event)

    def request_finished(self, request: Request,
                         block_ids: tuple[list[int], ...]) -> tuple[bool, None]:
        """Queue the request's confirmed blocks not stored yet (eager), drop its pending hit,
        and clean its load/store bookkeeping now, or when its transfers in flight finish.
        GPU blocks are protected by their own pins, so the scheduler may free at once."""
        self.queue_finished_store(request, block_ids)
        req_id = request.request_id
        pending = self.pending_hits.pop(req_id, None)
        if pending is not None:
            free_hit(self.cpu_block_pool, pending)
        load = self.reqs_to_load.get(req_id)
        if load is not None:
            if load.load_event is not None:
                load.finished = True
            else:
                self.cleanup_load(req_id)
        if not self.lazy:
            store = self.reqs_to_store.get(req_id)
            if store is not None:
                if store.store_events:
                    store.finished = True
                else:
                    self.cleanup_store_request(req_id)
        return False, None

    # -- state ------------------------------------------------------------------------------
    def on_new_request(self, request: Request) -> None:
        """Nothing to do: the tier keeps no state for a request before its lookup."""

    def cpu_counts(self) -> tuple[int, int, int]:
        """The CPU pool's (active, cached, empty) blocks."""
        return self.cpu_block_pool.count_states()

    def take_events(self) -> list[KVCacheEvent]:
        """The tier's KV events since the last call, in order (`offload_events`)."""
        return on_tier(self.cpu_block_pool.take_events(), self.medium)

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[CacheHitSource, int]:
        return single_source(self.settings.hit_source, num_external_tokens)

    def gpu_pins(self) -> dict[int, int]:
        """GPU block id -> references the connector holds on it (loads and stores)."""
        pins: dict[int, int] = {}
        for transfer in self.transfers():
            for block_id in transfer.gpu_block_ids:
                pins[block_id] = pins.get(block_id, 0) + 1
        return pins

    def cpu_pins(self) -> dict[int, int]:
        """CPU block id -> references: transfers in flight and pending hits."""
        pins: dict[int, int] = {}
        for transfer in self.transfers():
            for block_id in transfer.cpu_block_ids:
                pins[block_id] = pins.get(block_id, 0) + 1
        for hit in self.pending_hits.values():
            for group in hit.blocks:
                for block in group:
                    if not block.is_null:
                        pins[block.block_id] = pins.get(block.block_id, 0) + 1
        return pins

    def check_integrity(self) -> None:
        """The CPU pool's invariants with the connector's pins as its holders, and the
        bookkeeping's own: every sent load is listed under its event and vice versa, and the
        stores' states and events likewise (`check_store_integrity`)."""
        self.cpu_block_pool.check_integrity(self.cpu_pins())
        self.check_load_integrity()
        if self.store_event_counter and NO_EVENT in self.store_event_to_blocks:
            raise IntegrityError("offload: a store registered under no event")
        self.check_store_integrity()


def check_offload_supported(kv_cache_config: KVCacheConfig) -> None:
    """Configurations the twin's offload tier does not model, refused with the field to fix."""
    if any(isinstance(g.kv_cache_spec, MambaSpec) and g.kv_cache_spec.mamba_cache_mode != "align"
           for g in kv_cache_config.kv_cache_groups):
        raise ValueError("kv_connector: CPU offload beside a mamba group not in 'align' mode is "
                         "not implemented by the twin; use mamba_cache_mode 'align' or drop the "
                         "connector")
