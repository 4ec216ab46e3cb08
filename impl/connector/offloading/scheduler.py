"""`OffloadingConnectorScheduler`: the scheduler side of upstream's OffloadingConnector.

`--kv-offloading-size` keeps a copy of computed prompt chunks in a CPU tier (the offloading
manager, `manager`) and loads them back when a later request's prompt continues past its GPU
prefix hit. Per step the scheduler side does three things:

* **Lookups.** At admission, the request's chunks past its local hit are looked up in the
  manager, one group at a time, in prefix order; the hit stops at the first chunk absent, and
  a chunk still being written (or one another request is loading right now) makes the
  request wait a step instead (`None`). A hit loads asynchronously: once the scheduler has
  allocated GPU blocks for it, `update_state_after_alloc` pins the chunks and makes a load
  job, and the request waits for the worker to report it.
* **Stores.** Every step, each scheduled request (and each request finished since the last
  step) offers the chunks it has computed, allocated and keyed that it has not offered yet
  (prompt chunks only, by default); the manager picks slots (evicting by its policy) and the
  scheduler makes one store job per request with the GPU blocks to copy. The GPU blocks are
  not pinned: a finished request's blocks are watched instead, and a store whose blocks are
  handed out again, or whose request is preempted, is flushed (the worker finishes it before
  the step runs).
* **Completions.** The worker reports finished jobs; a load's chunks are unpinned, a store's
  chunks become readable. A request's bookkeeping goes once it has finished and its last job
  is done.

Lookups live in `lookup` (`Lookups`), stores in `stores` (`StoreOffers`) and `partial_tails`
(`PartialTails`), the mirrored block tables in `tables` (`BlockTables`), the jobs in flight
and their completions in `job_book` (`JobBook`); this module keeps loads, the step's
bookkeeping and resets.

Full-attention, sliding-window, chunked-local and mamba 'align' groups are twinned (windowed
lookups and sparse stores: `windows`; a mamba state is stored by the block the cache offers,
`stores`; with hashes finer than the block, a state inside a block too: `partial_tails`);
mamba in another mode is not (`windows.check_offloading_supported` says so), nor EAGLE/MTP drafter
groups (the workload format has no drafter with a connector), nor tiering backends (they need
their storage services).
A request's own caps (`OffloadLimits`: upstream's `max_load_tokens` and `max_offload_tokens`
transfer parameters) bound its lookups and stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from impl.connector.offloading.events import ConnectorEvents
from impl.connector.offloading.hit_sources import load_ranges, split_by_source
from impl.connector.offloading.jobs import (
    GPUBlocks,
    JobStatus,
    OffloadingMetadata,
    TransferJob,
)
from impl.connector.offloading.keys import OffloadKey, RequestContext
from impl.connector.offloading.lookup import Lookups, lookup_order
from impl.connector.offloading.manager import CPUOffloadingManager
from impl.connector.offloading.partial_tails import PartialTails, partial_tail_tokens
from impl.connector.offloading.request_state import GroupShape, RequestOffload
from impl.connector.offloading.stores import StoreOffers
from impl.connector.offloading.sync_loads import SyncLoads, kv_bytes_per_token
from impl.connector.offloading.tables import BlockTables
from impl.connector.offloading.windows import (
    mamba_align_tokens,
    window_in_chunks,
)
from impl.connector.types import OffloadingSettings
from impl.core.specs import KVCacheConfig
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from impl.core.events import KVCacheEvent
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.core.prefix_stats import CacheHitSource
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _alignment_tokens(shapes: tuple[GroupShape, ...]) -> int | None:
    """Where every CPU-tier hit ends: a multiple of the full-attention groups' chunk (when
    they agree on one); with no full-attention group, of the widest chunk. None: no rule."""
    full = {shape.tokens_per_chunk for shape in shapes if shape.window is None}
    if len(full) == 1:
        return full.pop()
    if not full and shapes:
        return max(shape.tokens_per_chunk for shape in shapes)
    return None


class OffloadingConnectorScheduler(Lookups, StoreOffers, PartialTails, BlockTables):
    completes_lagging_groups = False  # (`SchedulerConnector`)
    def __init__(self, settings: OffloadingSettings, kv_cache_config: KVCacheConfig, *,
                 hash_block_size: int, enable_prefix_caching: bool = True,
                 behaviour: Behaviour = DEFAULT_BEHAVIOUR, enable_events: bool = False) -> None:
        self.settings = settings
        self.behaviour = behaviour
        self.blocks_per_chunk = settings.blocks_per_chunk
        self.shapes = tuple(
            GroupShape(index, spec.block_size, spec.block_size * settings.blocks_per_chunk,
                       spec.block_size * settings.blocks_per_chunk // hash_block_size, spec,
                       window_in_chunks(spec, spec.block_size * settings.blocks_per_chunk))
            for index, spec in enumerate(g.kv_cache_spec
                                         for g in kv_cache_config.kv_cache_groups))
        self.retention_interval = kv_cache_config.prefix_cache_retention_interval
        self.alignment_tokens = _alignment_tokens(self.shapes)
        self.lookup_groups, self.windowed_groups = lookup_order(self.shapes)
        self.mamba_align_size = mamba_align_tokens(self.shapes)
        self.hash_block_tokens = hash_block_size
        self.partial_tail_tokens = partial_tail_tokens(self.shapes, self.blocks_per_chunk,
                                                       hash_block_size)
        self.group_block_sizes = [shape.tokens_per_block for shape in self.shapes]
        self.manager = CPUOffloadingManager(
            settings.num_cpu_chunks, settings.eviction_policy, enable_events=enable_events,
            store_threshold=settings.store_threshold,
            max_tracker_size=settings.max_tracker_size, behaviour=behaviour)
        self.events = ConnectorEvents(settings.self_describing_kv_events and enable_events)
        self.requests: dict[str, RequestOffload] = {}
        self.sync_loads = SyncLoads(
            settings.sync_load_budget_bytes if behaviour.offloading_sync_loads else 0,
            kv_bytes_per_token(kv_cache_config))
        super().__init__(enable_prefix_caching)

    # -- requests arriving and leaving -----------------------------------------------------
    def on_new_request(self, request: Request) -> None:
        state = RequestOffload.new(request, self.shapes)
        self.manager.on_new_request(state.context)
        self.requests[request.request_id] = state

    def request_finished(self, request: Request,
                         block_ids: tuple[list[int], ...]) -> tuple[bool, None]:
        """Key the request's last chunks (stored by the next step's store pass) and watch the
        blocks its stores in flight read. Never delays the free: the watch does that job."""
        state = self.requests.get(request.request_id)
        if state is None:  # never seen: the manager hears of it and of its end at once
            context = RequestContext(request.request_id)
            self.manager.on_new_request(context)
            self.manager.on_request_finished(context)
            return False, None
        state.extend_keys(self.shapes)
        for job_id in state.jobs:
            for block_id in self.jobs[job_id].deferred_fence:
                self.watched_blocks.setdefault(block_id, set()).add(job_id)
        return False, None

    # -- lookups and loads -----------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        """Tokens past the local hit the CPU tier can load (None: ask again next step), and
        whether they load asynchronously (whenever there are any, unless the step's sync-load
        budget takes them: `sync_loads`)."""
        state = self.requests[request.request_id]
        restart = self.behaviour.offloading_lookup_restarts_stores
        for group in state.groups:
            group.block_ids.clear()
            if restart:
                group.next_stored_chunk = 0  # restarting at token 0: offer every chunk again
        if state.jobs:
            return None, False  # its own transfers are still in flight
        state.extend_keys(self.shapes)
        state.num_local_tokens = num_computed_tokens
        hit: int | None = 0 if request.skip_reading_prefix_cache else self._lookup(state)
        sync = self.sync_loads.reserve(request.request_id, num_computed_tokens, hit,
                                       request.num_tokens)
        return hit, bool(hit) and not sync

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        """The GPU blocks for the hit are allocated: pin the chunks and make the load job.

        Only a loading admission's blocks are noted as handed out here (0.32); 0.33 notes every
        admission's (`Behaviour.offloading_notes_every_allocation`). With the connector alone
        the scheduler's output lists those anyway (`_follow_block_tables`); under a
        MultiConnector another connector's load allocates blocks the output does not list."""
        if num_external_tokens == 0:
            if self.behaviour.offloading_notes_every_allocation:
                for table in blocks.blocks:
                    self.batch_allocated.update(b.block_id for b in table if b.block_id != 0)
            return
        state = self.requests[request.request_id]
        sync = request.request_id in self.sync_loads.requests
        num_local = state.num_local_tokens
        num_cached = num_local + num_external_tokens
        tail = state.partial_tail_boundary  # (== num_cached when set)
        keys: list[OffloadKey] = []
        block_ids: list[int] = []
        sizes: list[int] = []
        starts: list[int] = []
        state.load_ranges = []
        for shape, group in zip(self.shapes, state.groups, strict=True):
            table = blocks.blocks[shape.group]
            self.batch_allocated.update(b.block_id for b in table if b.block_id != 0)
            num_blocks = _cdiv(num_cached, shape.tokens_per_block)
            start = num_blocks
            for index in range(_cdiv(num_local, shape.tokens_per_block), num_blocks):
                # (a sync load's blocks are hashed at allocation: the first one past the hit)
                if not table[index].is_null and (sync or table[index].block_hash is None):
                    start = index  # the first block the load fills
                    break
            num_chunks = _cdiv(num_cached, shape.tokens_per_chunk)
            if start < num_blocks:
                keys.extend(group.keys[start // self.blocks_per_chunk:
                                       num_chunks - (tail is not None)])
                if tail is not None:  # the chunk the tail ends in: read under its keys
                    keys.append(state.chunk_key(shape, tail))
                state.load_ranges += load_ranges(shape, start, num_local, num_cached,
                                                 self.blocks_per_chunk)
            block_ids.extend(b.block_id for b in table[start:num_blocks])
            sizes.append(num_blocks - start)
            starts.append(start)
            group.next_stored_chunk = num_chunks  # chunk-level policy: hits are not re-stored
        slots = self.manager.prepare_load(keys, state.context)
        job_id = self._new_job_id()
        self.batch_loads[job_id] = TransferJob(
            request.request_id, GPUBlocks(tuple(block_ids), tuple(sizes), tuple(starts)),
            tuple(slots), sync=sync)
        state.jobs.add(job_id)
        self.jobs[job_id] = JobStatus(request.request_id, 1, set(keys), is_store=False,
                                      is_sync_load=sync)
        if self.chunks_being_loaded is not None and not sync:  # done before the step runs
            self.chunks_being_loaded.update(keys)
        state.partial_tail_boundary = None

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[CacheHitSource, int]:
        state = self.requests[request.request_id]
        return split_by_source(state.load_ranges, state.num_local_tokens, num_external_tokens)

    # -- every step --------------------------------------------------------------------------
    def build_connector_meta(self, output: SchedulerOutput) -> OffloadingMetadata:
        self._follow_block_tables(output)
        for req_id in output.preempted_req_ids or ():
            state = self.requests.get(req_id)
            if state is not None:
                # stores (and a sync load, done by then): an async load is never preempted
                self.batch_flush.update(state.jobs)
        if self.watched_blocks and not self.watched_blocks.keys().isdisjoint(
                self.batch_allocated):
            for block_id in self.batch_allocated:
                self.batch_flush.update(self.watched_blocks.get(block_id, ()))
        stores = self._boundary_store_jobs(output) if output.boundary_states else {}
        if self.partial_tail_tokens and output.boundary_states:
            stores.update(self._partial_tail_store_jobs(output))
        stores.update(self._store_jobs(output))
        meta = OffloadingMetadata(self.batch_loads, stores, self.batch_flush)
        for req_id in output.finished_req_ids:
            state = self.requests.get(req_id)
            if state is None:
                continue
            state.finished_signalled = True
            self.manager.on_request_finished(state.context)
            if not state.jobs:
                del self.requests[req_id]
        self.batch_loads = {}
        self.sync_loads.end_step()
        self.batch_flush = set()
        self.batch_allocated = set()
        return meta

    def take_events(self) -> list[KVCacheEvent]:
        return self.events.kv_events(self.manager.take_events())

    def reset_cache(self) -> None:
        """Forget every chunk: jobs in flight are flushed and their reports ignored, finished
        requests forgotten, running ones offer their chunks again from the first.

        Upstream asserts that no step is half-gathered: a reset after another with no step
        between them, while jobs were in flight at the first (whose flushes wait for the next
        step), stops the engine. The twin stops alike (`conformance/upstream_bugs/
        offloading-double-reset-assert.jsonl`)."""
        if (self.batch_loads or self.batch_flush or self.batch_allocated
                or self.sync_loads.requests):
            raise ReleaseCheckFailed("offloading-reset-mid-step", (
                f"the connector's cache is reset with {len(self.batch_flush)} flushes, "
                f"{len(self.batch_loads)} loads and {len(self.batch_allocated)} allocated "
                "blocks of a step not yet built (a reset after a reset, no step between)"))
        self.batch_flush.update(self.jobs)
        for req_id, state in list(self.requests.items()):
            if state.request.is_finished():
                if not state.finished_signalled:
                    self.manager.on_request_finished(state.context)
                del self.requests[req_id]
        self.manager.reset_cache()
        self.events.reset()
        for state in self.requests.values():
            for group in state.groups:
                group.next_stored_chunk = 0
            state.jobs.clear()
            state.partial_tail_boundary = None
        self.stale_job_threshold = self.job_counter
        if self.behaviour.offloading_reset_fence:
            self.reset_fence.update((job_id, job.pending_workers)
                                    for job_id, job in self.jobs.items())
        self.jobs.clear()
        self.watched_blocks.clear()
        if self.chunks_being_loaded is not None:
            self.chunks_being_loaded.clear()

