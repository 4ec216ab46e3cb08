"""`ImplSystem`: the twin's scheduler (`impl.sched`) as a `System`.

The twin mirrors upstream's names, so this adapter is thin: build its `SchedulerConfig` and
`KVCacheConfig` from the workload's `EngineConfig`, derive NONE_HASH the twin's own way (from
PYTHONHASHSEED, as upstream does; the harness compares the two), and read its outputs into the
canonical records. Where the twin keeps sets (finished, preempted, resumed ids) the adapter
sorts them, exactly as for upstream.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import Any

from conformance.kv.family import group_shape
from conformance.kv.systems import impl_spec
from conformance.systems.connector import (
    impl_connector_output,
    offload_settings,
    remote_transfers_of,
    split_transfers,
)
from conformance.systems.controls import drive_control
from conformance.systems.pd import handed_on, remote_transfer
from conformance.systems.protocol import (
    FREE_HEAD,
    BlockCounts,
    CachedRequest,
    CacheEvent,
    EncoderCacheCounts,
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
    external_hash,
    grammar_rows,
    request_spec_metrics,
    resolved,
    spec_counts,
)
from conformance.systems.transfer_records import BlockIds
from workloads.controls import ControlSpec
from workloads.model import EngineConfig, RequestSpec


def build_impl_scheduler(config: EngineConfig, none_hash: bytes,
                         release: str | None = None) -> Any:
    """The twin's Scheduler (AsyncScheduler under async scheduling) for `config`, reproducing
    `release` where releases differ (None: the twin's default, `impl.behaviour`)."""
    from impl.behaviour import DEFAULT_BEHAVIOUR, behaviour_for
    from impl.core.specs import KVCacheConfig, KVCacheGroupSpec
    from impl.sched.async_scheduler import AsyncScheduler
    from impl.sched.config import SchedulerConfig
    from impl.sched.scheduler import Scheduler

    scheduler_config = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=config.long_prefill_token_threshold_adaptive,
        enable_chunked_prefill=config.enable_chunked_prefill,
        policy=config.policy,
        num_spec_tokens=config.num_spec_tokens,
        num_lookahead_tokens=config.num_lookahead_tokens,
        spec_method=config.spec_method,
        num_mtp_modules=config.mtp_modules,
        # A data-parallel rank is throttled by its engine core, never by its own cadence.
        prefill_schedule_interval=1 if config.data_parallel else config.prefill_schedule_interval,
        max_loras=config.max_loras,
        async_scheduling=config.async_scheduling,
        enable_prefix_caching=config.enable_prefix_caching,
        hash_algo=config.hash_algo,
        block_size=config.block_size,
        hash_block_size=config.effective_hash_block_size,
        enable_mamba_shared_prefix_checkpoint=config.enable_mamba_shared_prefix_checkpoint,
        enable_kv_cache_events=True,  # events are compared, as upstream's are published
        behaviour=DEFAULT_BEHAVIOUR if release is None else behaviour_for(release),
        continuum=continuum_settings(config),
        kv_connector=offload_settings(config),
        **encoder_settings(config),
        num_sampled_tokens_per_step=0 if config.runner == "pooling" else 1,
        log_iteration_details=config.log_iteration_details,
        per_request_spec_decode_metrics=config.per_request_spec_decode_metrics,
        decode_context_parallel_size=config.decode_context_parallel_size,
    )
    groups = tuple(KVCacheGroupSpec((f"layer{i}",), impl_spec(group_shape(config, g)))
                   for i, g in enumerate(config.kv_cache_groups))
    scheduler_cls = AsyncScheduler if config.async_scheduling else Scheduler
    kv_cache_config = KVCacheConfig(
        config.num_blocks, groups,
        prefix_cache_retention_interval=config.prefix_cache_retention_interval)
    return scheduler_cls(scheduler_config, kv_cache_config,
                         none_hash=none_hash,
                         log_stats=config.log_stats)


def _encoder_counts(scheduler: Any) -> EncoderCacheCounts:
    """The encoder cache's room and entries; an encoder-decoder model's cache has room only,
    and the identifiers the worker is still owed (as upstream's adapter reads them)."""
    cache = scheduler.encoder_cache
    if scheduler.is_encoder_decoder:
        return EncoderCacheCounts(cache.num_free_slots, cache.num_free_slots,
                                  tuple(sorted({*cache.allocated, *cache.to_free})))
    return EncoderCacheCounts(cache.num_free_slots, cache.num_freeable_slots,
                              tuple(sorted(cache.cached)))


def encoder_settings(config: EngineConfig) -> dict[str, Any]:
    """The twin's encoder budget, cache size and chunking rule (none: a text-only model)."""
    mm = config.multimodal
    if mm is None:
        return {}
    return {"max_num_encoder_input_tokens": mm.max_num_encoder_input_tokens,
            "encoder_cache_size": mm.encoder_cache_size,
            "disable_chunked_mm_input": mm.disable_chunked_mm_input,
            "mm_max_tokens_per_item": mm.max_tokens_per_item}


def continuum_settings(config: EngineConfig) -> Any:
    """The twin's continuum settings (None: the policy is not continuum)."""
    from impl.sched.continuum.settings import ContinuumSettings

    c = config.continuum
    if config.policy != "continuum":
        return None
    if c is None:
        return ContinuumSettings()
    return ContinuumSettings(c.ttl_ms, c.estimator, c.threshold_ms, c.step_ms)


def impl_factory(release: str | None) -> Callable[[EngineConfig], ImplSystem]:
    """The `EngineConfig -> System` factory of `impl` (release None) or `impl==X.Y.Z`."""
    if release is None:
        return ImplSystem
    return functools.partial(ImplSystem, release=release)


class ImplSystem:
    name = "impl"

    def __init__(self, config: EngineConfig, release: str | None = None) -> None:
        from impl.core.hashing import none_hash_from_env
        from impl.core.request_hasher import RequestBlockHasher

        self.config = config
        none_hash = none_hash_from_env(config.hash_algo)
        self.none_hash = bytes(none_hash).hex()
        self.scheduler: Any = build_impl_scheduler(config, none_hash, release)
        # Counts, cached ids and integrity checks at the cost of what a step changed, not of
        # the pools' size (`impl.core.block_states`; issue 31).
        self.scheduler.kv_cache_manager.block_pool.track_changes()
        if hasattr(self.scheduler.connector, "cpu_block_pool"):
            self.scheduler.connector.cpu_block_pool.track_changes()
        if release is not None:
            self.name = f"impl=={release}"
        self._hasher = RequestBlockHasher(
            config.effective_hash_block_size, config.hash_algo, none_hash,
            lookahead=self.scheduler.scheduler_config.num_hash_lookahead_tokens)
        self._throttled = False  # a DP engine core's word for the next step

    def add_request(self, request: RequestSpec, arrival_time: float) -> None:
        from impl.connector.types import OffloadLimits
        from impl.core.multimodal import MultiModalFeature
        from impl.sched.grammar import Grammar
        from impl.sched.request import Request

        lora = request.lora_name
        spec = request.grammar
        self.scheduler.add_request(Request(
            request.request_id, request.prompt_token_ids,
            max_tokens=request.max_tokens,
            stop_token_ids=request.stop_token_ids, eos_token_id=request.eos_token_id,
            ignore_eos=request.ignore_eos, priority=request.priority, arrival_time=arrival_time,
            cache_salt=request.cache_salt, lora_name=lora,
            lora_path=f"/loras/{lora}" if lora else None, block_hasher=self._hasher,
            job_id=request.job_id, is_last_step=request.is_last_step,
            # Interned as upstream's adapter does (`upstream.multimodal.mm_features`: pickled
            # hashes depend on whether equal identifiers are one object).
            mm_features=[MultiModalFeature(sys.intern(m.identifier), m.offset, m.length,
                                           m.is_embed) for m in request.mm_items],
            resumable=request.resumable,
            pooling=self.config.runner == "pooling",
            report_reused_blocks=request.kv_cache_report_mode == "full",
            kv_transfer=remote_transfer(request),
            offload_limits=None if request.offload_limits is None else OffloadLimits(
                request.offload_limits.max_load_tokens,
                request.offload_limits.max_offload_tokens),
            min_tokens=request.min_tokens,
            repetition_detection=None if (rd := request.repetition_detection) is None
            else (rd.max_pattern_size, rd.min_pattern_size, rd.min_count),
            grammar=None if spec is None else Grammar(
                spec.allowed_lo, spec.allowed_hi,
                (*request.stop_token_ids, *(() if request.eos_token_id is None
                                            else (request.eos_token_id,)))),
        ))

    def compile_grammar(self, request_id: str, failed: bool) -> None:
        """The engine finished compiling a request's grammar (`workloads.grammar`)."""
        from impl.sched.grammar import GrammarState

        request = self.scheduler.requests.get(request_id)
        if request is not None and request.grammar is not None:
            request.grammar.state = GrammarState.FAILED if failed else GrammarState.READY

    def control(self, control: ControlSpec) -> bool | None:
        """An operation between steps (`workloads.controls`)."""
        from impl.sched.pause import PauseState

        return drive_control(self.scheduler, control, PauseState)

    def attach_tracer(self, tracer: Any) -> None:
        """Record seed 002's per-step trace (`impl.sched.tracing.tracer`) into `tracer`."""
        self.scheduler.tracer = tracer

    def abort(self, request_id: str) -> bool:
        from impl.sched.request import RequestStatus

        return bool(self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED))

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def throttle_prefills(self, throttled: bool) -> None:
        """A data-parallel engine core's flag for the next step (`EngineConfig.data_parallel`)."""
        self._throttled = throttled

    def schedule(self) -> Scheduled:
        out = self.scheduler.schedule(self._throttled)
        new = tuple(NewRequest(r.req_id, len(r.prompt_token_ids), r.num_computed_tokens,
                               block_ids(r.block_ids), r.replay_start)
                    for r in out.scheduled_new_reqs)
        c = out.scheduled_cached_reqs
        cached = tuple(
            CachedRequest(rid, rid in c.resumed_req_ids, c.num_computed_tokens[i],
                          c.num_output_tokens[i],
                          None if c.new_block_ids[i] is None else block_ids(c.new_block_ids[i]))
            for i, rid in enumerate(c.req_ids))
        transfers, jobs = split_transfers(out.kv_connector_metadata)
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
            remote=remote_transfers_of(out.kv_connector_metadata),
            external_hits=tuple(self.scheduler.step_external_hits),
            encoder_inputs=tuple((rid, tuple(ids))
                                 for rid, ids in out.scheduled_encoder_inputs.items()),
            freed_encoder_ids=tuple(out.free_encoder_mm_hashes),
            encoder_input_stats=out.scheduled_encoder_input_stats,
            grammar_rows=() if out.pending_structured_output_tokens
            else grammar_rows(self.scheduler.get_grammar_bitmask(out)),
            pending_grammar=out.pending_structured_output_tokens,
            block_copies=tuple(out.kv_cache_block_copies),
            has_sync_kv_loads=out.has_sync_kv_loads,
        )

    def resolve_deferred(self, scheduled: Scheduled,
                         drafts: Sequence[tuple[str, Sequence[int]]]) -> Scheduled:
        """A step whose sampling waited for the step before (`Scheduled.pending_grammar`):
        the drafter's tokens replace its placeholder drafts, then its bitmask is made."""
        from impl.sched.output import DraftTokenIds

        out: Any = scheduled.native
        if drafts:
            self.scheduler.update_draft_token_ids_in_output(DraftTokenIds(
                [rid for rid, _ in drafts], [list(d) for _, d in drafts]), out)
        return resolved(scheduled, out.scheduled_spec_decode_tokens,
                        self.scheduler.get_grammar_bitmask(out))

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        from impl.sched.output import ModelRunnerOutput

        result = self.scheduler.update_from_output(scheduled.native, ModelRunnerOutput(
            req_ids=list(output.req_ids),
            req_id_to_index={rid: i for i, rid in enumerate(output.req_ids)},
            sampled_token_ids=[list(ids) for ids in output.sampled_token_ids],
            kv_connector_output=None if output.connector is None
            else impl_connector_output(output.connector),
            pooled_req_ids=frozenset(output.pooled),
        ))
        outputs = tuple(TokenOutput(o.request_id, tuple(o.new_token_ids), o.finish_reason,
                                    o.stop_reason, handed_on(o.kv_transfer_params),
                                    request_spec_metrics(o.spec_metrics))
                        for o in result)
        made = self.scheduler.make_stats()
        if made is None:  # stats off
            return Update(outputs, None, None)
        return Update(outputs, cache_stats(made.prefix_cache_stats), SchedulerStats(
            made.num_running_reqs, made.num_waiting_reqs, made.kv_cache_usage,
            made.num_skipped_waiting_reqs, spec_counts(made.spec_decoding_stats)),
            cache_stats(made.connector_prefix_cache_stats))

    def update_draft_token_ids(self, drafts: Sequence[tuple[str, Sequence[int]]]) -> None:
        from impl.sched.output import DraftTokenIds

        self.scheduler.update_draft_token_ids(DraftTokenIds(
            req_ids=[rid for rid, _ in drafts], draft_token_ids=[list(d) for _, d in drafts]))

    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        return block_tables_of(self.scheduler.kv_cache_manager, request_ids)

    def block_hashes(self, since: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
        return block_hashes_of(self.scheduler.requests, since)

    def state(self) -> SystemState:
        s = self.scheduler
        pool = s.kv_cache_manager.block_pool
        waiting = [r.request_id for r in s.kv_holding_waiting]
        waiting += [r.request_id for r in s.waiting]
        cpu = None if s.connector is None else s.connector.cpu_counts()
        return SystemState(
            running=tuple(r.request_id for r in s.running),
            waiting=tuple(waiting),
            blocks=BlockCounts(*pool.count_states()),
            free_head=tuple(b.block_id for b in islice(pool.free_block_queue, FREE_HEAD)),
            cached_ids=pool.cached_block_ids(),
            pinned=() if s.continuum is None else tuple(
                p.request.request_id for p in s.continuum.pins),
            cpu_blocks=None if cpu is None else BlockCounts(*cpu),
            encoder_cache=None if self.config.multimodal is None else _encoder_counts(s),
        )

    def take_events(self) -> tuple[CacheEvent, ...]:
        return tuple(_event(e) for e in self.scheduler.take_events())

    def check_integrity(self) -> None:
        self.scheduler.check_integrity()


def _event(event: Any) -> CacheEvent:
    kind = type(event).__name__
    if kind == "BlockStored":
        parent = event.parent_block_hash
        return CacheEvent("stored", event.group_id,
                          tuple(external_hash(h) for h in event.block_hashes),
                          None if parent is None else external_hash(parent),
                          len(event.token_ids), tuple(event.token_ids), event.block_size,
                          getattr(event, "lora_name", None), event.medium)
    if kind == "BlockRemoved":
        return CacheEvent("removed", event.group_id,
                          tuple(external_hash(h) for h in event.block_hashes),
                          medium=event.medium)
    return CacheEvent("cleared")
