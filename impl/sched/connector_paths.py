"""The scheduler's side of a KV connector (here: the CPU offload tier, `impl.connector`).

What changes when a connector is configured:

* **Asynchronous loads.** A request whose prompt continues on the CPU tier gets GPU blocks for
  those tokens at admission and then waits (WAITING_FOR_REMOTE_KVS) in `kv_holding_waiting`, a
  queue admission drains before `waiting`, until the worker reports its load finished; only
  then are the loaded blocks hashed and the request scheduled. Such an admission must leave
  the blocks in-flight prefills still need (`reserved_blocks`), or it could starve them.
* **Failed loads.** The worker reports blocks whose load failed: the request's computed tokens
  are cut at the first bad block; under `recompute` it carries on from there, under `fail` it
  finishes with an error.
* **Finishing.** The connector sees the finished request's block table (out-of-window blocks
  dropped first) before the blocks are freed; a request aborted mid-load keeps its blocks until
  the load reports back.
* **Deferred frees** (`impl.sched.block_frees`): with overlapping steps (async scheduling),
  freed blocks return to the pool only once every step that scheduled their request has been
  processed.
"""

from __future__ import annotations

from collections import deque

from mypy_extensions import trait

from impl.connector.cpu_offload import SimpleCPUOffloadScheduler, check_offload_supported
from impl.connector.multi import MultiConnectorScheduler
from impl.connector.nixl import NixlConnectorScheduler
from impl.connector.nixl_push import NixlPushConnectorScheduler
from impl.connector.offloading.scheduler import OffloadingConnectorScheduler
from impl.connector.offloading.windows import check_offloading_supported
from impl.connector.protocol import SchedulerConnector
from impl.connector.types import (
    FinishedTransfer,
    KVConnectorOutput,
    MultiSettings,
    NixlSettings,
    OffloadingSettings,
)
from impl.core.block import KVCacheBlock
from impl.core.kv_cache_manager import KVCacheBlocks
from impl.core.prefix_stats import PrefixCacheStats
from impl.core.single_type_manager import cdiv
from impl.core.specs import KVCacheConfig, MambaSpec
from impl.sched.block_frees import BlockFrees
from impl.sched.config import SchedulerConfig
from impl.sched.request import Request, RequestStatus
from impl.sched.request_queue import FCFSRequestQueue, PriorityRequestQueue
from vtwin.errors import ReleaseCheckFailed


@trait
class ConnectorPaths(BlockFrees):

    def _setup_connector(self, config: SchedulerConfig, kv_cache_config: KVCacheConfig) -> None:
        settings = config.kv_connector
        self.has_connector = settings is not None
        # The external prefix cache's lookups (upstream counts them even beside a CPU tier
        # left inert for want of prefix caching: it answers no hit).
        self.connector_prefix_cache_stats = (PrefixCacheStats() if self.has_connector
                                             and self.log_stats else None)
        # SimpleCPUOffload needs prefix caching (without it, it stays inert); the
        # OffloadingConnector runs either way.
        self.connector: SchedulerConnector | None = None
        self.recompute_kv_load_failures = False
        if isinstance(settings, MultiSettings):
            nixl = next(p for p in settings.parts if isinstance(p, NixlSettings))
            self.recompute_kv_load_failures = nixl.load_failure_policy == "recompute"
            self.connector = MultiConnectorScheduler(
                [self._one_connector(part, config, kv_cache_config) for part in settings.parts])
        elif isinstance(settings, NixlSettings | OffloadingSettings):
            if isinstance(settings, NixlSettings):
                self.recompute_kv_load_failures = settings.load_failure_policy == "recompute"
            self.connector = self._one_connector(settings, config, kv_cache_config)
        elif settings is not None:
            self.recompute_kv_load_failures = settings.load_failure_policy == "recompute"
            if config.enable_prefix_caching:
                check_offload_supported(kv_cache_config)
                cpu_tier = SimpleCPUOffloadScheduler(
                    settings, kv_cache_config, hash_block_size=config.effective_hash_block_size,
                    max_num_batched_tokens=config.max_num_batched_tokens,
                    use_eagle=config.use_eagle_block_drop,
                    enable_events=config.enable_kv_cache_events, behaviour=config.behaviour,
                    num_reprefillable_tokens=config.num_reprefillable_tokens)
                cpu_tier.bind_gpu_block_pool(self.kv_cache_manager.block_pool)
                self.connector = cpu_tier
        self.defer_block_free = settings is not None and config.async_scheduling
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.deferred_frees: deque[tuple[int, list[KVCacheBlock]]] = deque()
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        # Requests still prefilling (admitted with more prompt to go, or loading): what they
        # still need is reserved against asynchronous loads.
        self.inflight_prefills: dict[str, Request] = {}
        self.step_external_hits: list[tuple[str, int]] = []
        num_spec = (1 + config.num_spec_tokens + config.num_lookahead_tokens
                    if config.num_spec_tokens else 0)
        self.spec_decode_step_blocks = sum(
            cdiv(num_spec, g.kv_cache_spec.block_size) for g in kv_cache_config.kv_cache_groups
            if not isinstance(g.kv_cache_spec, MambaSpec))

    @staticmethod
    def _one_connector(settings: NixlSettings | OffloadingSettings, config: SchedulerConfig,
                       kv_cache_config: KVCacheConfig) -> SchedulerConnector:
        if isinstance(settings, NixlSettings):
            reprefillable = config.num_reprefillable_tokens
            return (NixlPushConnectorScheduler(kv_cache_config,
                                               num_reprefillable_tokens=reprefillable)
                    if settings.transfer_mode == "push"
                    else NixlConnectorScheduler(
                        kv_cache_config, bidirectional=settings.bidirectional,
                        recompute_threshold=settings.recompute_threshold,
                        num_reprefillable_tokens=reprefillable))
        check_offloading_supported(kv_cache_config, config.effective_hash_block_size)
        return OffloadingConnectorScheduler(
            settings, kv_cache_config, hash_block_size=config.effective_hash_block_size,
            enable_prefix_caching=config.enable_prefix_caching, behaviour=config.behaviour,
            enable_events=config.enable_kv_cache_events)

    # -- admission --------------------------------------------------------------------------
    def _remote_kv_ready(self, request: Request) -> bool:
        """A request waiting for its load: False while in flight; once reported, its loaded
        blocks are hashed (or, after a failure, only the good prefix is kept) and it goes
        back to WAITING (PREEMPTED if it had been preempted) to be scheduled now."""
        if request.request_id not in self.finished_recving_kv_req_ids:
            return False
        kv = self.kv_cache_manager
        if request.request_id in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                kv.cache_blocks(request, request.num_computed_tokens)
            else:
                kv.free(request)  # nothing usable: a retry may hit the local cache
            self.failed_recving_kv_req_ids.remove(request.request_id)
        else:
            kv.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1  # recompute it to sample
        self.finished_recving_kv_req_ids.remove(request.request_id)
        request.status = (RequestStatus.PREEMPTED if request.num_preemptions
                          else RequestStatus.WAITING)
        return True

    def _start_load(self, request: Request, queue: FCFSRequestQueue | PriorityRequestQueue,
                    hits: KVCacheBlocks, num_hit: int, num_external: int,
                    holding: list[Request]) -> bool:
        """Admit `request` only as far as its load: blocks for the local hit and the loaded
        tokens (unhashed until they arrive), nothing scheduled. The allocation must leave what
        in-flight prefills and one speculative step still need; False if it cannot."""
        assert self.connector is not None
        kv = self.kv_cache_manager
        reserved = self._inflight_prefill_reserved_blocks() + self.spec_decode_step_blocks
        blocks = kv.allocate_slots(request, 0, num_hit, hits,
                                   num_external_computed_tokens=num_external,
                                   delay_cache_blocks=True,
                                   full_sequence_must_fit=self.scheduler_config
                                   .scheduler_reserve_full_isl,
                                   reserved_blocks=reserved)
        if blocks is None:
            return False
        self.connector.update_state_after_alloc(request, kv.get_blocks(request.request_id),
                                                num_external)
        self.step_external_hits.append((request.request_id, num_external))
        kv.record_prefix_cache_stats(request, num_hit)
        request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
        request.num_computed_tokens = num_hit + num_external
        if request.num_preemptions == 0:
            # The prompt's cached tokens as a first admission counts them: the local hit and
            # what the connector loads (not what is left after the last token is recomputed).
            request.num_cached_tokens = num_hit + num_external
        self.inflight_prefills[request.request_id] = request
        holding.append(queue.pop_request())
        self.deferred_waiting.add(request.request_id)
        return True

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the in-flight prefills still need to hold their whole sequences."""
        coordinator = self.kv_cache_manager.coordinator
        empty = self.kv_cache_manager.empty_blocks().blocks
        total = 0
        for request in self.inflight_prefills.values():
            full = min(request.num_tokens, self.max_model_len)
            num_tokens = full + (1 + self.num_spec_tokens + self.num_lookahead_tokens
                                 if self.num_spec_tokens else 0)
            total += coordinator.get_num_blocks_to_allocate(
                request.request_id, num_tokens, empty, request.num_computed_tokens,
                apply_admission_cap=True, num_tokens_main=full)
        return total

    def _connector_finished(self, request: Request) -> tuple[bool, FinishedTransfer | None]:
        """Hand a finished request's block table (computed tokens only, out-of-window blocks
        dropped first) to the connector: whether the blocks must outlive the request, and what
        its output hands a P/D peer."""
        if not self.has_connector:
            return False, None
        kv = self.kv_cache_manager
        kv.remove_skipped_blocks(request.request_id,
                                 max(0, request.num_computed_tokens - request.num_inflight_tokens),
                                 request.num_prompt_tokens)
        if self.connector is None:
            return False, None
        block_ids = kv.get_block_ids(request.request_id)
        # A mamba table is not a run of per-token blocks: it goes whole.
        clipped = tuple(ids if isinstance(manager.kv_cache_spec, MambaSpec)
                        else ids[:cdiv(request.num_computed_tokens, size)]
                        for size, ids, manager in zip(self.connector.group_block_sizes,
                                                      block_ids, kv.coordinator.managers,
                                                      strict=True))
        return self.connector.request_finished(request, clipped)

    # -- the worker's report ----------------------------------------------------------------
    def _handle_invalid_blocks(self, invalid: frozenset[int],
                               num_scheduled: dict[str, int]) -> set[str]:
        """Cut each affected request's computed tokens at its first bad block. Returns the
        requests whose output this update must skip: under `recompute` the running ones that
        will redo the tokens; under `fail` every affected one (they finish with an error).

        Block ids are unique within a group only, so with several groups upstream refuses a
        block-level report and stops the engine, though its NIXL worker sends one wherever
        every group is full attention to it (a reference window beside full attention): the
        twin stops alike (`conformance/upstream_bugs/pd-failed-pull-two-groups.jsonl`)."""
        groups = len(self.kv_cache_manager.coordinator.managers)
        if groups > 1:
            raise ReleaseCheckFailed("block-level-failures-multi-group", (
                f"the connector reported invalid blocks {sorted(invalid)} on a model of "
                f"{groups} KV-cache groups"))
        waiting_loads = [r for r in self.kv_holding_waiting
                         if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS]
        async_failed = self._truncate_at_invalid(waiting_loads, invalid, num_scheduled,
                                                 evict=False)
        sync_failed = self._truncate_at_invalid(self.running, invalid, num_scheduled,
                                                evict=True)
        if not (async_failed or sync_failed):
            return set()
        if not self.recompute_kv_load_failures:
            return async_failed | sync_failed
        self.failed_recving_kv_req_ids |= async_failed
        return sync_failed

    def _truncate_at_invalid(self, requests: list[Request], invalid: frozenset[int],
                             num_scheduled: dict[str, int], *, evict: bool) -> set[str]:
        affected: set[str] = set()
        marked: set[int] = set()  # bad blocks a request before this one will recompute
        to_evict: set[int] = set()
        block_size = self.kv_cache_manager.coordinator.managers[0].block_size
        for request in requests:
            (table,) = self.kv_cache_manager.get_block_ids(request.request_id)
            computed = request.num_computed_tokens - num_scheduled.get(request.request_id, 0)
            hit = False
            truncated = False
            for index, block_id in zip(range(cdiv(computed, block_size)), table, strict=False):
                if block_id not in invalid:
                    continue
                hit = True
                if block_id in marked:
                    continue
                marked.add(block_id)
                if truncated:
                    continue
                truncated = True
                request.num_computed_tokens = index * block_size
                if evict:
                    to_evict.update(table[index:])
            if hit:
                if not truncated:
                    request.num_computed_tokens = computed
                affected.add(request.request_id)
        if to_evict and not self.recompute_kv_load_failures:
            self.kv_cache_manager.block_pool.evict_blocks(to_evict)
        return affected

    def _handle_failed_recving(self, failed: frozenset[str]) -> set[str]:
        """Whole pulls that failed (P/D): a request waiting for one loses every computed token;
        under `recompute` it starts over once the pull is reported, under `fail` it is
        returned to finish with an error."""
        affected: set[str] = set()
        for req_id in failed:
            request = self.requests.get(req_id)
            if request is None or request.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
                continue
            affected.add(req_id)
            if self.recompute_kv_load_failures:
                request.num_computed_tokens = 0
                self.failed_recving_kv_req_ids.add(req_id)
        return set() if self.recompute_kv_load_failures else affected

    def _update_from_kv_xfer_finished(self, output: KVConnectorOutput) -> None:
        """Loads reported finished: a waiting request becomes schedulable; one finished
        meanwhile (aborted mid-load) finally frees its blocks. Reads reported finished (P/D):
        the finished prefill frees the blocks it kept for its peer."""
        if self.connector is not None:
            self.connector.update_connector_output(output)
        for req_id in sorted(output.finished_recving):
            request = self.requests[req_id]
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(req_id)
            else:
                self._free_blocks(request)
        for req_id in sorted(output.finished_sending):
            self._free_blocks(self.requests[req_id])

    def _free_blocks(self, request: Request) -> None:
        self._free_request_blocks(request)
        del self.requests[request.request_id]
