"""Which GPU blocks the CPU offload tier copies, and what a finished copy publishes.

Eager mode follows each request's block table as the worker sees it (the step's new and cached
request data) and stores every block whose tokens are *confirmed*: computed before this step
and not async placeholders, hashed, not already on the CPU and not already being copied. A
block computed in this step is stored by a later step (or, if the request finishes first, by
the finish-time flush). Lazy mode stores nothing for running requests: it copies cached blocks
about to be evicted (`impl.connector.offload_lazy`). Beside a mamba
'align' group, eager mode also copies each state the cache offers with its block
(`_boundary_stores`). With KV events on, each chosen block's event payloads are captured
with it (`impl.connector.offload_events`) and announced when its copy completes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from impl.connector.offload_events import BlockMeta, capture_block_meta, stored_events
from impl.connector.offload_lazy import LazyStores
from impl.connector.offload_state import StoreBatch, StoreState, Transfer
from impl.core.block import KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.coordinator import KVCacheCoordinator
from impl.core.hashing import hashes_at_block_size
from impl.core.mamba_align import MambaAlignManager
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


class OffloadStores(LazyStores):
    fa_group: int  # the full-attention group prefixes are matched on
    cpu_block_pool: BlockPool
    cpu_coordinator: KVCacheCoordinator
    group_block_sizes: list[int]
    hash_block_size: int
    lazy: bool
    enable_events: bool  # the tier's own KV events (`offload_events`)
    medium: str  # their medium (`OffloadSettings.medium`)

    def __init__(self) -> None:
        self._gpu_pool: BlockPool | None = None
        self.cursor: KVCacheBlock | None = None  # (`LazyStores`)
        self.store_event_to_blocks: dict[int, Transfer] = {}
        self.store_event_to_reqs: dict[int, list[str]] = {}
        self.reqs_to_store: dict[str, StoreState] = {}  # eager only
        self.in_flight_store_gpu_blocks: set[int] = set()
        self.pending_finished_stores: list[Transfer] = []
        self.store_event_counter = 0

    def bind_gpu_block_pool(self, pool: BlockPool) -> None:
        self._gpu_pool = pool

    @property
    def gpu_pool(self) -> BlockPool:
        if self._gpu_pool is None:
            raise RuntimeError("offload: the GPU block pool is not bound yet")
        return self._gpu_pool

    def prepare_stores(self, output: SchedulerOutput) -> StoreBatch:
        return self._lazy_stores() if self.lazy else self._eager_stores(output)

    # -- eager --------------------------------------------------------------------------------
    def _eager_stores(self, output: SchedulerOutput) -> StoreBatch:
        batch = StoreBatch(block_meta=[] if self.enable_events else None)
        gpu, cpu = self.gpu_pool, self.cpu_block_pool
        num_groups = len(self.group_block_sizes)
        if output.boundary_states:
            self._boundary_stores(output, batch)
        for req_id in sorted(output.preempted_req_ids or ()):
            state = self.reqs_to_store.get(req_id)
            if state is not None:  # it resumes with a whole new block table
                state.block_ids = tuple([] for _ in range(num_groups))
                state.num_stored_blocks = [0] * num_groups
        for req_id, new_ids in _new_block_ids(output):
            state = self.reqs_to_store.get(req_id)
            if state is None or state.finished:
                continue
            if new_ids is not None:
                for group in range(min(num_groups, len(new_ids))):
                    state.block_ids[group].extend(new_ids[group])
            if not output.num_scheduled_tokens.get(req_id, 0):
                continue
            gpu_ids, advanced, metas = self.select_confirmed(state, state.block_ids)
            if gpu_ids:
                if batch.block_meta is not None:
                    batch.block_meta.extend(metas)
                cpu_ids = [b.block_id for b in cpu.get_new_blocks(len(gpu_ids))]
                batch.req_ids.append(req_id)
                batch.gpu_block_ids.extend(gpu_ids)
                batch.cpu_block_ids.extend(cpu_ids)
                self.in_flight_store_gpu_blocks.update(gpu_ids)
                gpu.touch([gpu.blocks[i] for i in gpu_ids])
            for group in range(num_groups):
                state.num_stored_blocks[group] += advanced[group]
        batch.req_ids = list(dict.fromkeys(batch.req_ids))
        return batch

    def _boundary_stores(self, output: SchedulerOutput, batch: StoreBatch) -> None:
        """The mamba 'align' states the cache keyed this step (`output.boundary_states`),
        each copied by its block (the table cannot be read by position), keyed on the CPU by
        the block's own hash; an offer the CPU pool has no room for is dropped, not retried.
        A request that frees its blocks first (preempted within the step) has its offers
        dropped by the cache itself (`MambaAlignManager.pop_blocks_for_free`), so none names a
        block handed out again (upstream checks the request here as well)."""
        gpu = self.gpu_pool
        num_free = self.cpu_block_pool.get_num_free_blocks()
        for offer in output.boundary_states:
            state = self.reqs_to_store.get(offer.request_id)
            if state is None or state.finished:
                continue
            block = gpu.blocks[offer.block_id]
            if not self._store_ready(block) or num_free <= 0:
                continue
            batch.gpu_block_ids.append(block.block_id)
            batch.cpu_block_ids.append(self.cpu_block_pool.get_new_blocks(1)[0].block_id)
            batch.req_ids.append(offer.request_id)
            if batch.block_meta is not None:
                batch.block_meta.append({})  # keyed by its block at completion: no payload
            self.in_flight_store_gpu_blocks.add(block.block_id)
            gpu.touch([block])
            num_free -= 1

    def select_confirmed(self, state: StoreState, block_ids: tuple[list[int], ...],
                         ) -> tuple[list[int], list[int], list[BlockMeta]]:
        """GPU blocks of `state`'s request ready to store, from each group's cursor up to its
        confirmed tokens (at most as many as the CPU pool has free blocks), and how far each
        group's cursor advances (blocks skipped as null, unhashed, in flight or already on the
        CPU count as scanned). A null block (left a sliding window) is stored from the GPU
        prefix cache if its hash is still there. With KV events on, also each chosen block's
        event payloads (empty otherwise)."""
        gpu = self.gpu_pool
        chosen: list[int] = []
        metas: list[BlockMeta] = []
        advanced = [0] * len(self.group_block_sizes)
        request = state.request
        confirmed = request.num_computed_tokens - request.num_output_placeholders
        num_free = self.cpu_block_pool.get_num_free_blocks()
        for group, group_ids in enumerate(block_ids):
            if len(chosen) >= num_free:
                break
            if isinstance(self.cpu_coordinator.managers[group], MambaAlignManager):
                continue  # its table nulls and relocates entries: `_boundary_stores` instead
            size = self.group_block_sizes[group]
            # (what the CPU coordinator would index of the confirmed tokens, as on the GPU)
            cacheable = self.cpu_coordinator.get_num_cacheable_tokens(confirmed, group)
            ready = min(len(group_ids), cacheable // size)
            hashes = hashes_at_block_size(request.block_hashes, self.hash_block_size, size)
            for index in range(state.num_stored_blocks[group], ready):
                block = gpu.blocks[group_ids[index]]
                if block.is_null:
                    found = (gpu.get_cached_block(hashes[index], [group])
                             if index < len(hashes) else None)
                    if not found:
                        advanced[group] += 1
                        continue
                    block = found[0]
                if not self._store_ready(block):
                    advanced[group] += 1
                    continue
                if len(chosen) >= num_free:
                    break
                chosen.append(block.block_id)
                advanced[group] += 1
                if self.enable_events:
                    assert block.block_hash is not None  # (`_store_ready`)
                    metas.append(capture_block_meta(request, index, block.block_hash, hashes,
                                                    size, self.hash_block_size))
        return chosen, advanced, metas

    def _store_ready(self, block: KVCacheBlock) -> bool:
        if block.is_null or block.block_hash is None:
            return False
        if block.block_id in self.in_flight_store_gpu_blocks:
            return False
        return self.cpu_block_pool.get_cached_block(block.block_hash,
                                                    [block.hash_group_id]) is None

    def queue_finished_store(self, request: Request, block_ids: tuple[list[int], ...]) -> None:
        """Eager: a finishing request's confirmed blocks not stored yet go with the next store
        event (blocks computed by its last steps would otherwise never reach the CPU)."""
        state = self.reqs_to_store.get(request.request_id)
        if state is None or self._gpu_pool is None:
            return
        gpu_ids, _, metas = self.select_confirmed(state, block_ids)
        tail = self._prompt_tail_block(request, block_ids)
        if (tail is not None and tail not in gpu_ids
                and len(gpu_ids) < self.cpu_block_pool.get_num_free_blocks()):
            gpu_ids.append(tail)
            metas.append({})  # keyed by its block at completion: no payload
        if not gpu_ids:
            return
        cpu_ids = [b.block_id for b in self.cpu_block_pool.get_new_blocks(len(gpu_ids))]
        self.pending_finished_stores.append(
            Transfer(gpu_ids, cpu_ids, metas if self.enable_events else None))
        self.in_flight_store_gpu_blocks.update(gpu_ids)
        gpu = self.gpu_pool
        gpu.touch([gpu.blocks[i] for i in gpu_ids])

    def _prompt_tail_block(self, request: Request, block_ids: tuple[list[int], ...]
                           ) -> int | None:
        """With sub-block hits on the CPU pool, a finishing request's full-attention block
        its prompt's last hash boundary falls inside (keyed there on the GPU, found by
        position: an attention table is append-only), if not on the CPU yet; None
        otherwise. A boundary on the block grid is the positional scan's already."""
        if not self.cpu_coordinator.sub_block_hits:
            return None
        hbs = self.hash_block_size
        size = self.group_block_sizes[self.fa_group]
        boundary = request.num_prompt_tokens // hbs * hbs
        if boundary == 0 or boundary > request.num_computed_tokens or boundary % size == 0:
            return None
        table = block_ids[self.fa_group]
        index = boundary // size
        if index >= len(table) or boundary // hbs > len(request.block_hashes):
            return None
        block = self.gpu_pool.blocks[table[index]]
        if block.is_null or block.block_id in self.in_flight_store_gpu_blocks:
            return None
        key = request.block_hashes[boundary // hbs - 1]
        if block.block_hash != key and (block.extra_hashes is None
                                        or key not in block.extra_hashes):
            return None
        if self.cpu_block_pool.get_cached_block(key, [self.fa_group]) is not None:
            return None
        return block.block_id

    def cleanup_store_request(self, req_id: str) -> None:
        """Forget a finished request's store state. Callers do so only once it has no store
        in flight: every event that listed it has completed, and its list went with it."""
        del self.reqs_to_store[req_id]

    def check_store_integrity(self) -> None:
        """Store bookkeeping: a request's events in flight and each event's requests list one
        another, every such event still holds its transfer, and a store state outlives its
        request only while a store of it is in flight (a leaked state would make a later
        request under the same id resume its stale block table)."""
        for req_id, state in self.reqs_to_store.items():
            if state.finished != state.request.is_finished():
                raise IntegrityError(f"offload: store state of {req_id} says finished="
                                     f"{state.finished}, its request is "
                                     f"{state.request.status.name}")
            if state.finished and not state.store_events:
                raise IntegrityError(f"offload: finished {req_id} keeps a store state with no "
                                     "store in flight")
            for event in state.store_events:
                if req_id not in self.store_event_to_reqs.get(event, ()):
                    raise IntegrityError(f"offload: store event {event} of {req_id} does not "
                                         "list it")
        for event, req_ids in self.store_event_to_reqs.items():
            if event not in self.store_event_to_blocks:
                raise IntegrityError(f"offload: store event {event} lists requests but no "
                                     "transfer")
            for req_id in req_ids:
                listed = self.reqs_to_store.get(req_id)
                if listed is None or event not in listed.store_events:
                    raise IntegrityError(f"offload: store event {event} lists {req_id}, whose "
                                         "store state does not have it")

    # -- completion ---------------------------------------------------------------------------
    def process_store_event(self, event: int) -> None:
        """A store event finished: its CPU copies take their GPU sources' hashes (announced,
        with KV events on), every pin drops (CPU copies join the CPU LRU as cached blocks),
        and eager requests that only waited for it are cleaned up. Unknown events (stale) are
        ignored."""
        transfer = self.store_event_to_blocks.pop(event, None)
        if transfer is None:
            return
        if not self.lazy:
            self.in_flight_store_gpu_blocks.difference_update(transfer.gpu_block_ids)
        gpu, cpu = self.gpu_pool, self.cpu_block_pool
        cpu_blocks = [cpu.blocks[i] for i in transfer.cpu_block_ids]
        metas = transfer.block_meta
        for index, (gpu_id, cpu_block) in enumerate(zip(transfer.gpu_block_ids, cpu_blocks,
                                                        strict=True)):
            source = gpu.blocks[gpu_id]
            block_hash = source.block_hash
            if block_hash is None:
                continue
            if cpu_block.block_hash != block_hash:
                # Its sub-block keys too (a prompt ending inside the block is found by them).
                cpu.index_block(cpu_block, block_hash, source.hash_group_id,
                                source.extra_hashes)
            if self.enable_events:
                cpu.kv_event_queue.extend(stored_events(
                    source, {} if metas is None else metas[index], self.group_block_sizes,
                    self.medium))
        cpu.free_blocks(cpu_blocks)
        gpu.free_blocks([gpu.blocks[i] for i in transfer.gpu_block_ids])
        if self.lazy:
            return
        for req_id in self.store_event_to_reqs.pop(event, []):
            state = self.reqs_to_store.get(req_id)
            if state is None:
                continue
            state.store_events.discard(event)
            if state.finished and not state.store_events:
                self.cleanup_store_request(req_id)


def _new_block_ids(output: SchedulerOutput,
                   ) -> Iterator[tuple[str, tuple[list[int], ...] | None]]:
    """(request id, block ids new to the worker) for every request the step schedules: new
    requests' whole tables first, then running and resumed ones."""
    for new in output.scheduled_new_reqs:
        yield new.req_id, new.block_ids
    cached = output.scheduled_cached_reqs
    yield from zip(cached.req_ids, cached.new_block_ids, strict=True)

