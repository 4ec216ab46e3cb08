"""The scheduler's other side: requests in, model outputs and drafts back, aborts, stats."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from mypy_extensions import trait

from impl.connector.types import FinishedTransfer
from impl.core.prefix_stats import PrefixCacheStats
from impl.sched.encoder_inputs import EncoderInputs
from impl.sched.integrity import check_scheduler_integrity
from impl.sched.output import DraftTokenIds, EngineCoreOutput, ModelRunnerOutput, SchedulerOutput
from impl.sched.pause import PauseState
from impl.sched.request import Request, RequestStatus
from impl.sched.resets import OperatorResets
from impl.sched.spec_stats import RequestSpecMetrics, SpecDecodingStats
from impl.sched.stop import check_stop
from impl.sched.streaming import StreamingSessions
from impl.sched.structured_output import StructuredOutput


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    num_running_reqs: int
    num_waiting_reqs: int
    kv_cache_usage: float
    prefix_cache_stats: PrefixCacheStats | None
    num_skipped_waiting_reqs: int = 0
    spec_decoding_stats: SpecDecodingStats | None = None  # drafts verified in the last update
    connector_prefix_cache_stats: PrefixCacheStats | None = None  # beside a connector


@trait
class SchedulerUpdates(OperatorResets, EncoderInputs, StreamingSessions, StructuredOutput):
    """Applying a step's output: finished loads, invalid blocks and deferred frees go through
    the connector paths first (by way of the resets' preemption base), encoder items the step
    passed are freed, and streaming sessions and grammars are advanced, hence the bases."""

    def add_request(self, request: Request) -> None:
        session = self.requests.get(request.request_id)
        if session is not None:  # a streaming session's next part, or its close
            if not self._add_to_session(session, request):
                self.finish_requests(request.request_id, RequestStatus.FINISHED_ABORTED)
            return
        if request.resumable and self.scheduler_config.async_scheduling:
            raise NotImplementedError(
                f"request {request.request_id!r}: streaming sessions under async scheduling "
                "(upstream drops the output of a step in flight when a turn ends, which the "
                "twin does not model)")
        self._open_session(request)
        level = self.scheduler_config.per_request_spec_decode_metrics
        if level != "none":
            request.spec_metrics = RequestSpecMetrics(self.num_spec_tokens, level == "detailed")
        if request.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
            self.deferred_waiting.add(request.request_id)  # skipped until its grammar compiles
        self.waiting.add_request(request)
        self.requests[request.request_id] = request
        if self.connector is not None:
            self.connector.on_new_request(request)
        if self.continuum is not None:
            self.continuum.request_arrives(request)

    def update_from_output(self, scheduler_output: SchedulerOutput,
                           model_runner_output: ModelRunnerOutput) -> list[EngineCoreOutput]:
        outputs: list[EngineCoreOutput] = []
        stopped_running: set[str] = set()  # request ids
        stopped_waiting: list[Request] = []
        sampled = model_runner_output.sampled_token_ids
        req_id_to_index = model_runner_output.req_id_to_index
        all_drafts = scheduler_output.scheduled_spec_decode_tokens
        requests = self.requests
        kv_output = model_runner_output.kv_connector_output
        if self.defer_block_free and scheduler_output.total_num_scheduled_tokens > 0:
            self.processed_step_seq += 1  # every write of this and earlier steps is done
            self._drain_deferred_frees()
        failed_loads: set[str] = set()
        if kv_output is not None and kv_output.failed_recving:
            failed_loads = self._handle_failed_recving(kv_output.failed_recving)
        if kv_output is not None and kv_output.invalid_block_ids:
            failed_loads |= self._handle_invalid_blocks(kv_output.invalid_block_ids,
                                                       scheduler_output.num_scheduled_tokens)
        # `Request.is_finished()` inlined on the hot path: statuses after PREEMPTED are the
        # finished ones (see `RequestStatus`).
        finished_after = RequestStatus.PREEMPTED
        # Read once: `behaviour` is a plain class, so each read is a lookup by name.
        cache_verified = self.behaviour.cache_verified_blocks_on_output
        spec_stats: SpecDecodingStats | None = None
        for req_id in scheduler_output.num_scheduled_tokens:
            request = requests.get(req_id)
            if request is None or request.status > finished_after or req_id in failed_loads:
                continue  # finished (aborted) while its step was in flight, or its load failed
            index = req_id_to_index.get(req_id)
            generated = sampled[index] if index is not None and sampled else None
            drafts = all_drafts.get(req_id) if all_drafts else None
            if drafts and generated:
                if self.log_stats:
                    if spec_stats is None:
                        spec_stats = SpecDecodingStats(self.num_spec_tokens)
                    # Drafts the grammar rejected (async) were never proposed, for the stats.
                    spec_stats.observe(
                        len(drafts) - scheduler_output.num_invalid_spec_tokens.get(req_id, 0),
                        len(generated) - 1)
                if request.spec_metrics is not None:
                    request.spec_metrics.observe(
                        len(drafts) - scheduler_output.num_invalid_spec_tokens.get(req_id, 0),
                        len(generated) - 1)
                num_rejected = len(drafts) - (len(generated) - 1)
                if request.num_computed_tokens > 0:
                    request.num_computed_tokens -= num_rejected
                if request.num_output_placeholders > 0:
                    request.num_output_placeholders -= num_rejected
            if request.mm_features:  # the step ran: items the decoder passed are done
                self._free_encoder_inputs(request)
            status_before = request.status
            if not generated:
                if not (request.pooling and req_id in model_runner_output.pooled_req_ids):
                    continue  # a partial prefill chunk samples nothing
                # A pooling request stops with its pooled output (its prompt is computed).
                request.status = RequestStatus.FINISHED_STOPPED
                new_token_ids: list[int] = []
            else:
                had_placeholders = request.num_output_placeholders > 0
                new_token_ids, stopped = self._update_request_with_output(request, generated)
                if cache_verified and status_before == RequestStatus.RUNNING:
                    self._cache_verified_blocks(request, len(generated) - len(new_token_ids),
                                                had_placeholders)
                if not stopped:
                    # (A session's stop reason from an earlier turn stays on its outputs.)
                    outputs.append(EngineCoreOutput(req_id, new_token_ids, None,
                                                    request.stop_reason))
                    continue
            finish_reason = request.get_finished_reason()  # before a session's turn ends
            transfer = None
            if self._handle_stopped_request(request):
                transfer = self._free_request(request)
                if transfer is not None and not transfer.readback and len(
                        request.output_token_ids) == len(
                        new_token_ids):  # its first output: a prefill reports its hit
                    transfer = replace(transfer,
                                       remote_prefill_cached_tokens=request.num_cached_tokens)
            if status_before == RequestStatus.RUNNING:
                stopped_running.add(req_id)
            else:
                stopped_waiting.append(request)
            outputs.append(EngineCoreOutput(req_id, new_token_ids, finish_reason,
                                            request.stop_reason, transfer,
                                            request.spec_metrics))
        if stopped_running:
            self.running = [r for r in self.running if r.request_id not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
            self.kv_holding_waiting.remove_requests(stopped_waiting)
        errors = self.grammar_compile_error_reqs | self.encoder_cache_mismatch_reqs
        self.grammar_compile_error_reqs = set()
        self.encoder_cache_mismatch_reqs = set()
        if failed_loads and not self.recompute_kv_load_failures:
            errors |= failed_loads
        if errors:
            for request in self.finish_requests(sorted(errors), RequestStatus.FINISHED_ERROR):
                outputs.append(EngineCoreOutput(request.request_id, [],
                                                request.get_finished_reason()))
        if kv_output is not None:
            self._update_from_kv_xfer_finished(kv_output)
        self.spec_decoding_stats = spec_stats
        self._publish_events()
        return outputs

    def _publish_events(self) -> None:
        """The step's KV events as upstream publishes them at the end of an update: the GPU
        pool's, then the connector tier's (`Scheduler.take_events` hands them out)."""
        self.published_events.extend(self.kv_cache_manager.take_events())
        if self.connector is not None:
            self.published_events.extend(self.connector.take_events())

    def _cache_verified_blocks(self, request: Request, num_trimmed: int,
                               had_placeholders: bool) -> None:
        """0.33: a request whose step verified drafts (or ran ahead under async scheduling)
        caches the blocks its now-known tokens filled as soon as the output is applied, not at
        its next allocation. Computed tokens count every sampled token but the last, so tokens
        a stop trimmed are taken back first; tokens of a step still in flight are not known."""
        request.num_computed_tokens -= num_trimmed
        if had_placeholders or self.num_spec_tokens:
            self.kv_cache_manager.cache_blocks(
                request, request.num_computed_tokens - request.num_inflight_tokens)

    def _update_request_with_output(self, request: Request,
                                    new_token_ids: list[int]) -> tuple[list[int], bool]:
        max_model_len = self.max_model_len
        # `enumerate` without a start: mypyc compiles `enumerate(x, 1)` as a call to the
        # builtin and a tuple per token (perf: 8% of a whole-trace replay was this loop).
        for index, token in enumerate(new_token_ids):
            request.append_output_token(token)
            if check_stop(request, max_model_len):
                return new_token_ids[:index + 1], True
        return new_token_ids, False

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        for req_id, drafts in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids,
                                  strict=True):
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            # Drafts continue the sequence; a request still mid-prefill has none to verify.
            request.spec_token_ids = [] if request.is_prefill_chunk else \
                self._grammar_drafts(request, list(drafts))

    def finish_requests(self, request_ids: str | Iterable[str],
                        finished_status: RequestStatus) -> list[Request]:
        """Finish (abort) requests from outside; unknown or finished ids are ignored."""
        assert RequestStatus.is_finished(finished_status)
        ids = (request_ids,) if isinstance(request_ids, str) else tuple(request_ids)
        valid = [r for r in (self.requests.get(i) for i in ids)
                 if r is not None and not r.is_finished()]
        running = {r.request_id for r in valid if r.status == RequestStatus.RUNNING}
        if running:
            self.running = [r for r in self.running if r.request_id not in running]
        waiting = [r for r in valid if r.request_id not in running]
        self.num_waiting_for_streaming_input -= sum(
            1 for r in waiting if r.status == RequestStatus.WAITING_FOR_STREAMING_REQ)
        if waiting:
            self.waiting.remove_requests(waiting)
            self.kv_holding_waiting.remove_requests(waiting)
        for request in valid:
            delay_free = False
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # Its load is in flight: the blocks stay until the worker reports it.
                delay_free = request.request_id not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(request.request_id)
                self.failed_recving_kv_req_ids.discard(request.request_id)
            request.status = finished_status
            self._free_request(request, delay_free)
        return valid

    def _free_request(self, request: Request, delay_free: bool = False
                      ) -> FinishedTransfer | None:
        """Finish `request`: its blocks go back now or once the connector is done with them.
        Returns what its output hands a P/D peer (None: nothing)."""
        assert request.is_finished()
        self.inflight_prefills.pop(request.request_id, None)
        held, transfer = self._connector_finished(request)
        delay_free |= held
        self.encoder_cache.free(request)
        self.finished_req_ids.add(request.request_id)
        self.deferred_waiting.discard(request.request_id)
        if self.continuum is not None and self.continuum.on_finish(request):
            return transfer  # pinned: its blocks stay for the job's next turn (continuum)
        if not delay_free:
            self._free_blocks(request)
        return transfer

    def check_integrity(self) -> None:
        """Queues, statuses and block ownership agree (see `impl.sched.integrity`), then the KV
        cache's own check; raises `IntegrityError`."""
        check_scheduler_integrity(self)
        self.encoder_cache.check_integrity(self.requests)

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    def get_num_unfinished_requests(self) -> int:
        """Requests the scheduler may still schedule: none while paused for all, running and
        KV-holding ones while paused for new requests (`impl.sched.pause`), never a session
        waiting for input (`impl.sched.streaming`)."""
        if self.pause_state == PauseState.PAUSED_ALL:
            return 0
        waiting = len(self.kv_holding_waiting)
        if self.pause_state != PauseState.PAUSED_NEW:
            waiting += len(self.waiting)
        # Sessions waiting for their next input part are not work the engine can do.
        return waiting - self.num_waiting_for_streaming_input + len(self.running)

    def set_pause_state(self, pause_state: PauseState) -> None:
        self.pause_state = pause_state

    def has_unfinished_requests(self) -> bool:
        return self.get_num_unfinished_requests() > 0

    def has_finished_requests(self) -> bool:
        """Requests finished this step, or (with a connector) finished but still holding
        blocks until a transfer reports back."""
        if self.finished_req_ids or not self.has_connector:
            return bool(self.finished_req_ids)
        running, waiting = self.get_request_counts()  # paused ones too: they are not finished
        return len(self.requests) > running + waiting

    def has_requests(self) -> bool:
        """Whether the engine must keep stepping: requests unfinished or just finished, KV
        pins held, or a connector with stores still in flight (their completions arrive only
        with a step's output)."""
        connector = getattr(self, "connector", None)
        return (self.has_unfinished_requests() or self.has_finished_requests()
                or self.has_pins()
                or (connector is not None and connector.has_pending_stores()))

    def has_pins(self) -> bool:
        """KV pins still held (continuum): the engine keeps stepping until they expire."""
        return self.continuum is not None and bool(self.continuum.pins)

    def get_kv_cache_usage(self) -> float:
        return self.kv_cache_manager.usage

    def make_stats(self) -> SchedulerStats | None:
        """Requests skipped by admission (`deferred_waiting`) are reported apart from those
        waiting for room; None with stats off."""
        if not self.log_stats:
            return None
        running, waiting = self.get_request_counts()
        deferred = len(self.deferred_waiting)
        external = self.connector_prefix_cache_stats
        if external is not None:
            self.connector_prefix_cache_stats = PrefixCacheStats()
        return SchedulerStats(running, waiting - deferred, self.kv_cache_manager.usage,
                              self.kv_cache_manager.make_prefix_cache_stats(), deferred,
                              self.spec_decoding_stats, external)
