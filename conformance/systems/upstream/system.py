"""`UpstreamSystem`: upstream vLLM's V1 `Scheduler` (or `AsyncScheduler`) as a `System`.

One adapter class per upstream API era: `UpstreamSystem` is the 0.32 era; another era is a
subclass that names its versions in `VERSIONS` and overrides only what changed, and
`eras.adapter_for` picks the class for the vLLM installed in this process (a worker process runs
each release in its own environment, see `conformance.systems.remote`).

Built in-process from a workload's `EngineConfig` (see `upstream_config`), driven the way
`EngineCore.step` / `step_with_batch_queue` drive it, and read back into canonical records.
NONE_HASH is derived by upstream's own `init_none_hash` (PYTHONHASHSEED, else its default rule)
and re-pinned before every call, because it is a module global another instance may have
re-derived; KV-cache events are captured instead of published. vLLM is imported only when an
instance is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.systems.connector import (
    kv_cache_tensors_for,
    remote_transfers_of,
    split_transfers,
    upstream_connector_output,
)
from conformance.systems.controls import drive_control
from conformance.systems.pd import handed_on, upstream_transfer_params
from conformance.systems.protocol import (
    FREE_HEAD,
    BlockCounts,
    CachedRequest,
    CacheEvent,
    CacheStats,
    NewRequest,
    RunnerOutput,
    Scheduled,
    SchedulerStats,
    SystemState,
    TokenOutput,
    Update,
)
from conformance.systems.readback import (
    block_hashes_of,
    block_ids,
    block_tables_of,
    cache_stats,
    grammar_rows,
    request_spec_metrics,
    resolved,
    spec_counts,
)
from conformance.systems.transfer_records import BlockIds
from conformance.systems.upstream.capabilities import SCHEDULER_MEMBERS, check_members, honour
from conformance.systems.upstream.config import build_kv_cache_config, build_vllm_config
from conformance.systems.upstream.events import EventSink, upstream_event
from conformance.systems.upstream.grammar import (
    finish_compile,
    install_backend,
    start_compile,
    structured_outputs,
)
from conformance.systems.upstream.multimodal import (
    encoder_counts,
    encoder_input_stats,
    encoder_schedule,
    give_encoder,
    mm_features,
)
from conformance.systems.upstream.pool_watch import PoolWatch
from conformance.systems.upstream.sampling import repetition_detection_params
from vtwin.errors import UserError
from workloads.controls import ControlSpec
from workloads.model import EngineConfig, RequestSpec


def pooled_outputs(output: RunnerOutput) -> list[Any]:
    """A pooling model runner's output: a pooled tensor for each request whose prompt the step
    finished, None for the others (still prefilling)."""
    import torch

    pooled = set(output.pooled)
    return [torch.zeros(1) if rid in pooled else None for rid in output.req_ids]


class UpstreamSystem:
    """The 0.32 API era. `scheduler_cls` (``module:Class``) replaces the scheduler class, as
    vLLM's ``--scheduler-cls`` does; the system's name then says so."""

    VERSIONS: tuple[str, ...] = ("0.32.",)
    """Version prefixes this era's adapter drives."""
    MEMBERS: tuple[str, ...] = (*SCHEDULER_MEMBERS, "kv_holding_waiting")
    """What this era's adapter calls or reads on the scheduler (checked when it is built)."""
    name = "upstream-0.32.0"

    def __init__(self, config: EngineConfig, scheduler_cls: str | None = None,
                 connector_class: tuple[str, str] | None = None) -> None:
        from vllm import __version__ as version
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.structured_output import StructuredOutputManager

        if not version.startswith(self.VERSIONS):
            raise UserError(f"{type(self).__name__} drives vLLM {'x, '.join(self.VERSIONS)}x; "
                            f"installed: {version}")
        self.name = f"upstream-{version}" + (f"+sched={scheduler_cls}" if scheduler_cls else "")
        self.config = config
        vllm_config = build_vllm_config(config, connector_class)
        hash_fn = get_hash_fn_by_name(config.hash_algo)
        kv_cache_utils.init_none_hash(hash_fn)
        self._none_hash = kv_cache_utils.NONE_HASH
        self._lora_ids: dict[str, int] = {}
        self.none_hash = bytes(self._none_hash).hex()
        scheduler_class = self.scheduler_class(scheduler_cls)
        arguments = honour(scheduler_class, self.cache_arguments(), config, version,
                           owner="Scheduler")
        self.scheduler: Any = scheduler_class(
            vllm_config=vllm_config, structured_output_manager=StructuredOutputManager(vllm_config),
            log_stats=config.log_stats, **arguments)
        check_members(self.scheduler, self.MEMBERS, version)
        # The records follow the V1 model runner's layout (resumed requests are cached ones);
        # V2 is only chosen where Triton runs, which a CPU oracle never has, but pin it anyway.
        self.scheduler.use_v2_model_runner = False
        # EAGLE-style lookahead without a draft model to build: the scheduler reads the count
        # from the attribute at every allocation (connector-free paths use nothing else).
        self.scheduler.num_lookahead_tokens = config.num_lookahead_tokens
        give_encoder(self.scheduler, config)
        pool = self.scheduler.kv_cache_manager.block_pool
        pool.enable_kv_cache_events = True
        self.scheduler.kv_cache_manager.enable_kv_cache_events = True
        self._sink = EventSink()
        self.scheduler.kv_event_publisher = self._sink
        # From 0.33 an EAGLE config hashes each block with the token after it (the engine
        # builds the request hasher from the config's lookahead; earlier releases have none).
        lookahead = getattr(vllm_config, "num_hash_lookahead_tokens", 0)
        self._block_hasher = kv_cache_utils.get_request_block_hasher(
            config.effective_hash_block_size, hash_fn,
            **({"num_hash_lookahead_tokens": lookahead} if lookahead else {}))
        self._external_hits: list[tuple[str, int]] = []
        self._offload = self._watch_connector()
        connector = config.kv_connector
        # A MultiConnector's connectors, in order (the worker's metadata has a slot each).
        self._connector_layout = tuple(c.type for c in connector.connectors) \
            if connector is not None else ()
        # Counts and cached ids kept as the pools change, not walked every step (issue 31).
        self._gpu_watch = PoolWatch(pool)
        self._cpu_watch = (None if self._offload is None
                           else PoolWatch(self._offload.cpu_block_pool))
        self._grammars: dict[str, RequestSpec] = {}  # compiles in flight (`upstream.grammar`)
        self._grammars_seen = False
        self._throttled = False  # a DP engine core's word for the next step
        if config.data_parallel:
            self.as_data_parallel_rank()

    def as_data_parallel_rank(self) -> None:
        """Run as one rank of a data-parallel deployment (`EngineConfig.data_parallel`): its
        engine core passes `throttle_prefills` to every `schedule()`."""
        import inspect

        if "throttle_prefills" not in inspect.signature(self.scheduler.schedule).parameters:
            raise UserError(f"data_parallel: {self.name}'s scheduler takes no "
                            "throttle_prefills (its data-parallel prefill balancing is not "
                            "driven from the engine core)")

    def _watch_connector(self) -> Any:
        """The offload tier's scheduler-side manager (None: no connector, or an inert one);
        the connector's `update_state_after_alloc` is wrapped to record external hits."""
        connector = getattr(self.scheduler, "connector", None)
        if connector is None:
            return None
        update = connector.update_state_after_alloc

        def recording(request: Any, blocks: Any, num_external_tokens: int) -> None:
            if num_external_tokens > 0:
                self._external_hits.append((request.request_id, num_external_tokens))
            update(request, blocks, num_external_tokens)

        connector.update_state_after_alloc = recording
        return getattr(connector, "scheduler_manager", None)

    def _take_external_hits(self) -> tuple[tuple[str, int], ...]:
        hits, self._external_hits = tuple(self._external_hits), []
        return hits

    def scheduler_class(self, plugged: str | None) -> Any:
        """The workload's scheduler class, or the plugged-in ``module:Class``."""
        if plugged is not None:
            module_name, _, attribute = plugged.partition(":")
            try:
                return getattr(importlib.import_module(module_name), attribute)
            except (ImportError, AttributeError) as err:
                raise UserError(f"scheduler class {plugged!r}: {err}") from None
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler

        return AsyncScheduler if self.config.async_scheduling else Scheduler

    def cache_arguments(self) -> dict[str, Any]:
        """The scheduler's KV-cache arguments (the era's `KVCacheConfig` and block sizes)."""
        config = self.config
        kv_cache_config = build_kv_cache_config(config)
        kv_cache_config.kv_cache_tensors = kv_cache_tensors_for(config)
        return {"kv_cache_config": kv_cache_config,
                "block_size": config.scheduler_block_size,
                "hash_block_size": config.effective_hash_block_size}

    def _pin_none_hash(self) -> None:
        from vllm.v1.core import kv_cache_utils

        kv_cache_utils.NONE_HASH = self._none_hash

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, request: RequestSpec, arrival_time: float) -> None:
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(
            max_tokens=request.max_tokens, min_tokens=request.min_tokens,
            stop_token_ids=list(request.stop_token_ids), ignore_eos=request.ignore_eos,
        )
        if request.eos_token_id is not None:
            # What the engine's input processor does with the model's EOS id.
            params.update_from_generation_config({}, request.eos_token_id)
        if request.grammar is not None:
            params.structured_outputs = structured_outputs()
        if request.repetition_detection is not None:
            params.repetition_detection = repetition_detection_params(
                request.repetition_detection, request.request_id)
        extra: dict[str, Any] = {}
        if request.kv_cache_report_mode != "incremental":  # read by upstream's Request
            extra["kv_cache_report_mode"] = request.kv_cache_report_mode
        transfer = upstream_transfer_params(request, self.config.block_size)
        if transfer is not None:  # a P/D part, offload caps (read by upstream's Request)
            extra["kv_transfer_params"] = transfer
        if extra:
            params.extra_args = extra
        lora = None
        if request.lora_name:
            # One int id per adapter name, as the engine's LoRA manager numbers them (the
            # max_loras limit counts ids).
            lora_id = self._lora_ids.setdefault(request.lora_name, len(self._lora_ids) + 1)
            lora = LoRARequest(request.lora_name, lora_id, f"/loras/{request.lora_name}")
        pooling = None
        if self.config.runner == "pooling":  # a pooling model's request samples nothing
            from vllm.pooling_params import PoolingParams

            params, pooling = None, PoolingParams(task="embed")
        self._pin_none_hash()
        native = Request(
            request.request_id, list(request.prompt_token_ids), params, pooling,
            arrival_time=arrival_time, priority=request.priority,
            cache_salt=request.cache_salt, lora_request=lora,
            mm_features=mm_features(request), block_hasher=self._block_hasher,
            resumable=request.resumable,
        )
        if request.grammar is not None:
            if not self._grammars_seen:
                install_backend(self.scheduler)
                self._grammars_seen = True
            self._grammars[request.request_id] = request
            start_compile(native)
        self.scheduler.add_request(native)

    def compile_grammar(self, request_id: str, failed: bool) -> None:
        """The engine finished compiling a request's grammar (`workloads.grammar`)."""
        finish_compile(self.scheduler, self._grammars.pop(request_id), failed)

    def abort(self, request_id: str) -> bool:
        from vllm.v1.request import RequestStatus

        return bool(self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED))

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def control(self, control: ControlSpec) -> bool | None:
        """An operation between steps (`workloads.controls`), as the engine core's utility
        calls make it."""
        from vllm.v1.core.sched.interface import PauseState

        self._pin_none_hash()
        return drive_control(self.scheduler, control, PauseState)

    # -- one step ---------------------------------------------------------------------------
    def throttle_prefills(self, throttled: bool) -> None:
        """A data-parallel engine core's flag for the next step (`EngineConfig.data_parallel`)."""
        self._throttled = throttled

    def schedule(self) -> Scheduled:
        self._pin_none_hash()
        out = (self.scheduler.schedule(throttle_prefills=self._throttled)
               if self.config.data_parallel else self.scheduler.schedule())
        new = tuple(
            # (releases before bounded replay have no `replay_start`: nothing replays there)
            NewRequest(r.req_id, len(r.prompt_token_ids or ()), r.num_computed_tokens,
                       block_ids(r.block_ids), getattr(r, "replay_start", 0))
            for r in out.scheduled_new_reqs
        )
        c = out.scheduled_cached_reqs
        encoder_inputs, freed_encoder_ids = encoder_schedule(out)
        # As the engine reads it: async scheduling with a grammar request's step in flight.
        pending = bool(getattr(out, "pending_structured_output_tokens", False))
        cached = tuple(
            CachedRequest(
                rid, rid in c.resumed_req_ids, c.num_computed_tokens[i], c.num_output_tokens[i],
                None if c.new_block_ids[i] is None else block_ids(c.new_block_ids[i]),
            )
            for i, rid in enumerate(c.req_ids)
        )
        transfers, jobs = split_transfers(getattr(out, "kv_connector_metadata", None))
        return Scheduled(
            new_reqs=new,
            cached_reqs=cached,
            num_scheduled_tokens=tuple(out.num_scheduled_tokens.items()),
            total_num_scheduled_tokens=out.total_num_scheduled_tokens,
            spec_tokens=tuple((rid, tuple(ids))
                              for rid, ids in out.scheduled_spec_decode_tokens.items()),
            finished_req_ids=tuple(sorted(out.finished_req_ids)),
            preempted_req_ids=tuple(sorted(out.preempted_req_ids or ())),
            num_common_prefix_blocks=tuple(out.num_common_prefix_blocks),
            native=out,
            transfers=transfers,
            jobs=jobs,
            remote=remote_transfers_of(getattr(out, "kv_connector_metadata", None)),
            external_hits=self._take_external_hits(),
            encoder_inputs=encoder_inputs,
            freed_encoder_ids=freed_encoder_ids,
            encoder_input_stats=encoder_input_stats(out),
            # As the engine asks right after scheduling (sync scheduling only: see
            # `workloads.grammar`); only workloads with grammars ask.
            grammar_rows=grammar_rows(self.scheduler.get_grammar_bitmask(out))
            if self._grammars_seen and not pending else (),
            pending_grammar=pending,
            # (releases before sub-block hits have no copies)
            block_copies=tuple((c.src_block_id, c.dst_block_id)
                               for c in getattr(out, "kv_cache_block_copies", None) or ()),
            has_sync_kv_loads=bool(getattr(out, "has_sync_kv_loads", False)),
        )

    def resolve_deferred(self, scheduled: Scheduled,
                         drafts: Sequence[tuple[str, Sequence[int]]]) -> Scheduled:
        """What `step_with_batch_queue` does for a deferred scheduler output once the step
        before it is applied: the drafts into the output, then the grammar bitmask."""
        from vllm.v1.outputs import DraftTokenIds

        out: Any = scheduled.native
        if drafts:
            self.scheduler.update_draft_token_ids_in_output(DraftTokenIds(
                req_ids=[rid for rid, _ in drafts],
                draft_token_ids=[list(d) for _, d in drafts]), out)
        return resolved(scheduled, out.scheduled_spec_decode_tokens,
                        self.scheduler.get_grammar_bitmask(out))

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        from vllm.v1.outputs import ModelRunnerOutput

        runner_output = ModelRunnerOutput(
            req_ids=list(output.req_ids),
            req_id_to_index={rid: i for i, rid in enumerate(output.req_ids)},
            sampled_token_ids=[list(ids) for ids in output.sampled_token_ids],
            kv_connector_output=None if output.connector is None
            else upstream_connector_output(output.connector, self._connector_layout,
                                           self.config.decode_context_parallel_size),
            pooler_output=pooled_outputs(output) if self.config.runner == "pooling" else None,
        )
        self._pin_none_hash()
        result = self.scheduler.update_from_output(scheduled.native, runner_output)
        outputs: list[TokenOutput] = []
        stats: CacheStats | None = None
        counts: SchedulerStats | None = None
        external: CacheStats | None = None
        for client in sorted(result):
            eco = result[client]
            for o in eco.outputs:
                reason = None if o.finish_reason is None else str(o.finish_reason)
                outputs.append(TokenOutput(
                    o.request_id, tuple(o.new_token_ids), reason, o.stop_reason,
                    handed_on(o.kv_transfer_params),
                    request_spec_metrics(getattr(o, "spec_decode_metrics", None))))
            if eco.scheduler_stats is not None:
                made = eco.scheduler_stats
                stats = cache_stats(made.prefix_cache_stats)
                external = cache_stats(getattr(made, "connector_prefix_cache_stats", None))
                counts = SchedulerStats(
                    made.num_running_reqs, made.num_waiting_reqs, made.kv_cache_usage,
                    getattr(made, "num_skipped_waiting_reqs", 0),
                    spec_counts(made.spec_decoding_stats))
        return Update(tuple(outputs), stats, counts, external)

    def update_draft_token_ids(self, drafts: Sequence[tuple[str, Sequence[int]]]) -> None:
        from vllm.v1.outputs import DraftTokenIds

        self.scheduler.update_draft_token_ids(DraftTokenIds(
            req_ids=[rid for rid, _ in drafts], draft_token_ids=[list(d) for _, d in drafts]))

    # -- observation ------------------------------------------------------------------------
    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        return block_tables_of(self.scheduler.kv_cache_manager, request_ids)

    def block_hashes(self, since: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
        return block_hashes_of(self.scheduler.requests, since)

    def state(self) -> SystemState:
        s = self.scheduler
        pool = s.kv_cache_manager.block_pool
        waiting = [r.request_id for q in self.waiting_queues() for r in q]
        return SystemState(
            running=tuple(r.request_id for r in s.running),
            waiting=tuple(waiting),
            blocks=BlockCounts(*self._gpu_watch.block_counts()),
            free_head=self.free_head(pool.free_block_queue),
            cached_ids=self._gpu_watch.cached_ids(),
            cpu_blocks=self._cpu_counts(),
            encoder_cache=encoder_counts(s, self.config),
        )

    def _cpu_counts(self) -> BlockCounts | None:
        """The CPU tier's (active, cached, empty): SimpleCPUOffload's pool as watched; the
        OffloadingConnector's manager from its counters (chunks pinned by a load or being
        written, chunks idle, slots free)."""
        if self._cpu_watch is not None:
            return BlockCounts(*self._cpu_watch.block_counts())
        connector = getattr(self.scheduler, "connector", None)
        parts = getattr(connector, "_connectors", None) or [connector]  # a MultiConnector's
        manager = next((m for c in parts if (m := getattr(
            getattr(c, "connector_scheduler", None), "manager", None)) is not None), None)
        if manager is None:
            return None
        empty = (len(manager._free_list) + manager._num_chunks
                 - manager._num_allocated_chunks)
        cached = manager._num_evictable_cache_chunks
        return BlockCounts(manager._num_chunks - empty - cached, cached, empty)

    @staticmethod
    def free_head(queue: Any) -> tuple[int, ...] | None:
        """The first `FREE_HEAD` free block ids in eviction order, walking upstream's doubly
        linked free list from its sentinel head (never the whole list: this runs every step).
        None when the queue is not the linked list this era has."""
        node = getattr(getattr(queue, "fake_free_list_head", None), "next_free_block", None)
        tail = getattr(queue, "fake_free_list_tail", None)
        if node is None or tail is None:
            return None
        ids: list[int] = []
        while node is not None and node is not tail and len(ids) < FREE_HEAD:
            ids.append(node.block_id)
            node = node.next_free_block
        return tuple(ids)

    def waiting_queues(self) -> tuple[Any, ...]:
        """The scheduler's waiting queues, in the order it visits them."""
        return (self.scheduler.kv_holding_waiting, self.scheduler.waiting)

    def take_events(self) -> tuple[CacheEvent, ...]:
        events, self._sink.events = self._sink.events, []
        events.extend(self.scheduler.kv_cache_manager.take_events() or ())
        return tuple(upstream_event(e) for e in events)

    def check_integrity(self) -> None:
        """Upstream has no integrity check of its own; the comparison is the check."""
