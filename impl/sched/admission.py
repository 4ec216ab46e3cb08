"""Admission: which waiting requests join the running ones in a step, and how far each goes.

Waiting requests are admitted in queue order (the policy's promise) while token budget, seats
and KV blocks last; admission stops at the first that does not fit, except for requests the
step cannot take for a reason of their own (their KV load still in flight, an adapter over
`max_loras`, from 0.33 an item the encoder cannot take yet), which are set aside for the step
and keep their place. A request's first chunk starts after its prefix-cache hit (and what a
connector loads); it is cut by the long-prefill threshold, the budget, mamba's block alignment
and its multimodal items, then padded to a uniform spec-decode width where that applies.
"""

from __future__ import annotations

from mypy_extensions import trait

from impl.sched.admission_rules import AdmissionRules, reserve_prefill_lookahead
from impl.sched.mamba_split import MambaAlignedSplit
from impl.sched.output import PLACEHOLDER_DRAFT
from impl.sched.pause import PauseState
from impl.sched.replay import hit_worth_replaying, mark_prefix_replay
from impl.sched.request import Request, RequestStatus
from impl.sched.step_plan import StepPlan
from impl.sched.tracing import points as trace_points
from impl.sched.tracing.tracer import Tracer
from impl.sched.updates import SchedulerUpdates


@trait
class Admission(SchedulerUpdates, AdmissionRules):
    # Set by `Scheduler.__init__`; declared here for the mypyc build.
    tracer: Tracer | None
    mamba_split: MambaAlignedSplit | None
    prefix_replay_tokens: int  # bounded replay's window (`impl.sched.replay`); 0: none

    def _prefill_threshold(self) -> int:
        """The per-request chunk cap, which only matters when requests compete: a request alone
        in the scheduler may use the whole budget. Every queued request counts, even one held
        back by a pause or a session waiting for input (upstream counts its queues). Adaptive
        (`long_prefill_token_threshold_adaptive`): never below a fair share of the budget, the
        batched-token budget divided among those requests."""
        running, waiting = self.get_request_counts()
        num_requests = running + waiting
        config = self.scheduler_config
        threshold = config.long_prefill_token_threshold
        if num_requests <= 1 or threshold == 0:
            return 0
        if config.long_prefill_token_threshold_adaptive:
            return max(threshold, config.max_num_batched_tokens // num_requests)
        return threshold

    def _admit_waiting(self, plan: StepPlan, hold_prefill: bool) -> None:
        """Admit waiting (and preempted) requests while budget, seats and blocks last; stop at
        the first that does not fit (the queue order is the policy's promise)."""
        config = self.scheduler_config
        kv = self.kv_cache_manager
        threshold = self._prefill_threshold()
        # An admitted decode is padded to a uniform spec-decode batch only if no running request
        # of this step continues a prefill, and this is a decode (a running request scheduled
        # already, or computed tokens of its own: a bare 1-token prompt alone is a prefill).
        no_prefill_running = not plan.prefill_running
        loras = self._loras_in_use(plan)
        skipped: list[Request] = []
        holding: list[Request] = []  # skipped requests that hold blocks
        # Paused for new requests: only those holding KV blocks (their loads) are admitted.
        admits_new = self.pause_state == PauseState.UNPAUSED
        while plan.token_budget > 0:
            # (Tested here, not in the loop's condition: mypyc miscompiles the `continue`s
            # below when that condition mixes a bool with the queues' truth values.)
            if not self.kv_holding_waiting and not (admits_new and len(self.waiting) > 0):
                break
            # Sessions waiting for their next input part keep their seats.
            if len(self.running) + self.num_waiting_for_streaming_input >= \
                    self.max_num_running_reqs:
                break
            queue = self.kv_holding_waiting or self.waiting
            request = queue.peek_request()
            if (request.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
                    and not self._grammar_ready(request)):
                skipped.append(queue.pop_request())  # its grammar is still compiling (or failed)
                self.deferred_waiting.add(request.request_id)
                continue
            if request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:
                # A session between its input parts: nothing to compute until one arrives.
                (holding if request.num_computed_tokens else skipped).append(queue.pop_request())
                self.deferred_waiting.add(request.request_id)
                continue
            if (request.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                    and not self._remote_kv_ready(request)):
                holding.append(queue.pop_request())  # its load is still in flight
                self.deferred_waiting.add(request.request_id)
                continue
            if (loras is not None and request.lora_name is not None
                    and len(loras) == config.max_loras and request.lora_name not in loras):
                # its adapter would exceed max_loras
                (holding if request.num_computed_tokens else skipped).append(queue.pop_request())
                self.deferred_waiting.add(request.request_id)
                continue
            num_external, load_async = 0, False
            lookup = (0, 0)  # the connector's (queries, hits), counted if admitted
            fresh = request.num_computed_tokens == 0  # not resuming after a finished load
            if fresh:
                diverged = False
                if self.connector is not None and self.connector.completes_lagging_groups:
                    hits, num_hit, diverged = kv.get_computed_blocks_for_connector(request)
                else:
                    hits, num_hit = kv.get_computed_blocks(request)
                if self.connector is not None:
                    # The connector sees the hit cut to whole blocks, so that a longer hit of
                    # its own can supersede a sub-block tail (`impl.core.partial_hits`).
                    tail = num_hit % config.scheduler_block_size
                    matched, load_async = self.connector.get_num_new_matched_tokens(
                        request, num_hit - tail)
                    if request.skip_reading_prefix_cache:
                        matched, load_async = 0, False
                    if matched is None:  # the connector cannot tell yet: ask next step
                        skipped.append(queue.pop_request())
                        self.deferred_waiting.add(request.request_id)
                        continue
                    if tail and matched > tail:  # load past the tail instead of copying it
                        num_hit -= tail
                        hits = kv.truncate_hit(hits, num_hit)
                    elif tail:
                        matched, load_async = 0, False  # the local tail reaches further
                    num_external = matched
                    if diverged and not num_external:  # no pull brings the lagging state
                        hits, num_hit = kv.get_computed_blocks(request)
                if self.has_connector:  # (an inert CPU tier answers no hit)
                    lookup = (request.num_tokens - num_hit, num_external)
                num_computed = num_hit + num_external
                if self.tracer is not None:
                    trace_points.prefix_cache_event(self.tracer, request, num_hit)
                if self.prefix_replay_tokens and not hit_worth_replaying(
                        num_computed, self.prefix_replay_tokens):
                    hits, num_hit, num_computed = kv.empty_blocks(), 0, 0
                    num_external, load_async = 0, False
                    lookup = (lookup[0], 0)
            else:
                hits, num_hit, num_computed = kv.empty_blocks(), 0, request.num_computed_tokens
            if load_async:
                if not self._start_load(request, queue, hits, num_hit, num_external, holding):
                    break
                self._record_connector_lookup(request, *lookup)
                continue
            if hold_prefill and num_computed < request.num_tokens - 1:
                break  # prompt left to compute: wait for a step that carries prefill
            num_replay = 0
            if self.prefix_replay_tokens and request.num_computed_tokens == 0:
                num_replay = mark_prefix_replay(request, num_computed, self.prefix_replay_tokens)
                num_computed -= num_replay
            num_new = request.num_tokens - num_computed
            pad = 0
            if no_prefill_running and (plan.scheduled_running or num_computed > 0):
                pad = self._uniform_decode_padding(num_computed, num_new)
                if pad and num_new + pad > plan.token_budget:
                    break  # upstream would rather not schedule it than schedule it unpadded
                num_new += pad
            if 0 < threshold < num_new:
                num_new = threshold
            if not config.enable_chunked_prefill and num_new > plan.token_budget:
                break
            num_new = min(num_new, plan.token_budget)
            if num_new <= 0:
                self._fail_empty_admission(request, num_computed)
            if self.mamba_split is not None:
                if not (num_new := self.mamba_split.clip(request, num_new,
                                                         num_hit + num_external)):
                    break  # no block-aligned chunk fits: admission stops
                if pad and num_new != 1 + self.num_spec_tokens:
                    num_new, pad = 1, 0  # the split cut the padded rows: unpadded instead
            if request.mm_features:
                num_new = self.choose_encoder_inputs(plan, request, num_computed, num_new)
            if self.prefill_lookahead > 1:  # a chain of MTP modules
                num_new = reserve_prefill_lookahead(request, num_computed, num_new,
                                                    self.prefill_lookahead)
            if num_new == 0:  # its next item does not fit the encoder
                if not self.behaviour.encoder_blocked_admission_skips:
                    break  # admission stops
                # The requests behind it still get their turn.
                (holding if request.num_computed_tokens else skipped).append(queue.pop_request())
                self.deferred_waiting.add(request.request_id)
                continue
            # Replayed tokens already have their (hit) slots: only those past the hit need any.
            # (a sync load's tokens, `num_external`, count as computed: hashed at allocation)
            blocks = kv.allocate_slots(request, max(num_new - num_replay, 0), num_hit, hits,
                                       num_lookahead_tokens=self.num_lookahead_tokens,
                                       num_external_computed_tokens=num_external,
                                       full_sequence_must_fit=config.scheduler_reserve_full_isl,
                                       num_encoder_tokens=self.encoder_tokens(plan, request))
            if blocks is None:
                if request.mm_features:  # the references its encoder choice took go back
                    self.encoder_cache.free(request)
                break
            if self.connector is not None:
                self.connector.update_state_after_alloc(request, kv.get_blocks(
                    request.request_id), num_external)
                if num_external:  # loaded within the step
                    self.step_external_hits.append((request.request_id, num_external))
                    plan.has_sync_kv_loads = True
            self._record_connector_lookup(request, *lookup)
            if request.num_computed_tokens == 0:  # only admitted lookups count
                kv.record_prefix_cache_stats(request, num_hit)
            queue.pop_request()
            self.running.append(request)
            if request.status == RequestStatus.PREEMPTED:
                plan.scheduled_resumed.append(request)
            else:
                plan.scheduled_new.append(request)
            plan.schedule(request, num_new, kv.get_blocks(request.request_id))
            if request.mm_features:
                self.commit_encoder_inputs(plan, request)
            if pad:
                plan.spec_tokens[request.request_id] = [PLACEHOLDER_DRAFT] * pad
            plan.prefill_admitted |= num_computed < request.num_tokens - 1
            if loras is not None and request.lora_name is not None:
                loras.add(request.lora_name)
            self.deferred_waiting.discard(request.request_id)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            if request.num_cached_tokens < 0 or (fresh and request.num_preemptions == 0):
                # Its hit as upstream's prefill stats count it: at every fresh admission
                # until it is preempted (after a failed load, the new hit replaces the old).
                request.num_cached_tokens = num_computed
            if self.has_connector and num_computed + num_new < request.num_tokens:
                self.inflight_prefills[request.request_id] = request
        for request in reversed(skipped):  # back to the front, in their order
            self.waiting.prepend_request(request)
        for request in reversed(holding):
            self.kv_holding_waiting.prepend_request(request)

    def _record_connector_lookup(self, request: Request, queries: int, hits: int) -> None:
        """Count an admitted request's lookup in the connector's stats: the tokens past the
        local hit it was asked for and those it supplies, split by the tier they come from
        (asked of the connector once its load is planned; never for a preempted request)."""
        stats = self.connector_prefix_cache_stats
        if stats is None or queries == 0:
            return
        preempted = request.num_preemptions > 0
        sources = None
        if hits and not preempted:
            assert self.connector is not None
            sources = self.connector.get_external_cache_hit_sources(request, hits)
        stats.record(queries, hits, preempted, sources)
