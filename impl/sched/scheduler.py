"""`Scheduler`: decides, every step, how many tokens each request computes.

There is no prefill or decode phase: each request has computed `num_computed_tokens` of its
`num_tokens_with_spec` positions, and a step assigns tokens so requests catch up, out of one
token budget. Running requests go first (they hold KV blocks); when one cannot get blocks the
scheduler preempts (FCFS: the most recently admitted; priority: the least important) and
retries. Waiting requests are admitted only in steps without preemption, so admission never
causes the preemption churn it would otherwise feed.
"""

from __future__ import annotations

from impl.connector.protocol import SchedulerConnector
from impl.connector.types import OffloadMetadata
from impl.core.context_parallel import dcp_scheduler_view
from impl.core.events import KVCacheEvent
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.prefix_stats import PrefixCacheStats
from impl.core.specs import KVCacheConfig
from impl.sched.admission import Admission
from impl.sched.admission_rules import reserve_prefill_lookahead
from impl.sched.config import SchedulerConfig, check_eagle, check_mamba_caching
from impl.sched.continuum.policy import ContinuumPolicy
from impl.sched.continuum.settings import ContinuumSettings
from impl.sched.encoder_budget import compute_mm_encoder_budget
from impl.sched.encoder_cache import EncoderCacheManager
from impl.sched.encoder_decoder_cache import (
    EncoderDecoderCacheManager,
    check_encoder_decoder,
    is_encoder_decoder,
)
from impl.sched.make_output import make_output
from impl.sched.mamba_split import MambaAlignedSplit
from impl.sched.manager_rules import hand_rules_to_managers
from impl.sched.output import (
    SchedulerOutput,
)
from impl.sched.pause import PauseState
from impl.sched.prefill_cadence import PrefillCadence
from impl.sched.queues import create_request_queue
from impl.sched.replay import prefix_replay_window
from impl.sched.request import Request, RequestStatus
from impl.sched.spec_stats import SpecDecodingStats
from impl.sched.step_plan import StepPlan
from impl.sched.tracing import points as trace_points
from impl.sched.tracing.tracer import Tracer


class Scheduler(Admission):
    # Set by `ConnectorPaths._setup_connector`; declared here for the mypyc build, which
    # types this class's attributes from its own body.
    has_connector: bool
    connector: SchedulerConnector | None
    defer_block_free: bool
    sched_step_seq: int
    inflight_prefills: dict[str, Request]
    step_external_hits: list[tuple[str, int]]
    connector_prefix_cache_stats: PrefixCacheStats | None

    def __init__(self, scheduler_config: SchedulerConfig, kv_cache_config: KVCacheConfig, *,
                 none_hash: bytes, log_stats: bool) -> None:
        # Under DCP the scheduler works in blocks spanning every rank's share of the tokens.
        kv_cache_config = dcp_scheduler_view(kv_cache_config,
                                             scheduler_config.decode_context_parallel_size)
        self.scheduler_config = scheduler_config
        self.max_num_running_reqs = scheduler_config.max_num_seqs
        self.max_num_scheduled_tokens = scheduler_config.max_num_batched_tokens
        self.max_model_len = scheduler_config.max_model_len
        self.num_sampled_tokens_per_step = scheduler_config.num_sampled_tokens_per_step
        self.policy = scheduler_config.policy
        # `none_hash` seeds the requests' block hashers (built by the caller); `log_stats` off:
        # no prefix-cache, spec-decoding or scheduler stats are kept or made.
        self.behaviour = scheduler_config.behaviour
        self.log_stats = log_stats
        check_mamba_caching(scheduler_config, kv_cache_config)
        check_eagle(scheduler_config, kv_cache_config)
        check_encoder_decoder(scheduler_config, kv_cache_config)
        self.kv_cache_manager = KVCacheManager(
            kv_cache_config, scheduler_config.max_model_len,
            hash_block_size=scheduler_config.effective_hash_block_size,
            enable_caching=scheduler_config.enable_prefix_caching, log_stats=log_stats,
            enable_kv_cache_events=scheduler_config.enable_kv_cache_events,
            max_in_flight_tokens=scheduler_config.max_in_flight_tokens,
            use_eagle=scheduler_config.use_eagle_block_drop,
            num_reprefillable_tokens=scheduler_config.num_reprefillable_tokens,
        )
        # Multimodal models: the encoder's budget per step and its cache (`encoder_inputs`).
        encoder_budget, encoder_cache_size = compute_mm_encoder_budget(scheduler_config)
        self.max_num_encoder_input_tokens = encoder_budget
        # An encoder-decoder model (`encoder_decoder_cache`) encodes once, on the first step.
        self.is_encoder_decoder = is_encoder_decoder(kv_cache_config)
        self.encoder_cache = (EncoderDecoderCacheManager if self.is_encoder_decoder
                              else EncoderCacheManager)(encoder_cache_size)
        self.encoder_cache_mismatch_reqs: set[str] = set()
        self.grammar_compile_error_reqs: set[str] = set()  # `structured_output`
        self.pause_state = PauseState.UNPAUSED  # `impl.sched.pause`
        self.num_waiting_for_streaming_input = 0  # sessions between parts (`streaming`)
        # Requests an operator's reset preempted since the last step (reported with its output).
        self.preempted_between_steps: set[str] = set()
        self.spec_decoding_stats: SpecDecodingStats | None = None  # of the last update
        self.requests: dict[str, Request] = {}
        self.waiting = create_request_queue(self.policy)
        # Waiting requests that hold KV blocks (loading from a connector, or loaded): admission
        # drains them before `waiting`.
        self.kv_holding_waiting = create_request_queue(self.policy)
        self.running: list[Request] = []
        self.finished_req_ids: set[str] = set()
        self.published_events: list[KVCacheEvent] = []
        self.prev_step_scheduled_req_ids: set[str] = set()
        self.num_lookahead_tokens = scheduler_config.num_lookahead_tokens
        self.num_spec_tokens = scheduler_config.num_spec_tokens
        self.prefill_lookahead = scheduler_config.num_prefill_lookahead
        self.num_preemptions = 0
        # Waiting requests skipped by admission (max_loras) and not admitted since: a queue
        # holding only these is not a sign of saturation (`PrefillCadence`).
        self.deferred_waiting: set[str] = set()
        self.cadence = PrefillCadence(scheduler_config.prefill_schedule_interval
                                      if self.behaviour.local_prefill_interval else 1)
        # Policy extension points (None under fcfs / priority: their paths stay upstream's).
        self.continuum = ContinuumPolicy(scheduler_config.continuum or ContinuumSettings(),
                                         self.kv_cache_manager, self.requests) \
            if self.policy == "continuum" else None
        self.tracer: Tracer | None = None  # seed 002's per-step trace, when attached
        self.mamba_split = MambaAlignedSplit.setup(scheduler_config, kv_cache_config,
                                                   self.kv_cache_manager)  # None: no 'align'
        self.prefix_replay_tokens = prefix_replay_window(kv_cache_config)
        self._setup_connector(scheduler_config, kv_cache_config)
        hand_rules_to_managers(self.kv_cache_manager, self.behaviour, self.connector is not None,
                               scheduler_config.num_hash_lookahead_tokens,
                               self.mamba_split is not None and self.mamba_split.exact_junction)

    # -- scheduling -----------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """One step, in phases: running requests first (they hold blocks; one that cannot get
        blocks preempts another), then, only in a step that preempted nothing, waiting ones.
        `throttle_prefills`: a data-parallel engine core keeps prefill out of this step
        (`PrefillCadence`)."""
        if self.continuum is not None:  # pins expire before anything is allocated
            self.continuum.start_step(self.waiting)  # type: ignore[arg-type]
        if self.tracer is not None:
            trace_points.snapshot(self, self.tracer)
        self.kv_cache_manager.new_step_starts()
        self.step_external_hits = []
        paused_all = self.pause_state == PauseState.PAUSED_ALL
        plan = StepPlan(0 if paused_all else self.max_num_scheduled_tokens,
                        self.max_num_encoder_input_tokens)
        hold_prefill = self.cadence.holds_prefill(self.running, throttle_prefills)
        self._schedule_running(plan, hold_prefill)
        self._check_running_loras(plan)
        if not plan.preempted and not paused_all:
            self._admit_waiting(plan, hold_prefill)
            if not hold_prefill:
                # Both waiting queues: the skipped ones (`deferred_waiting`) include sessions
                # and loads parked in `kv_holding_waiting`.
                _, num_waiting = self.get_request_counts()
                self.cadence.admission_done(num_waiting - len(self.deferred_waiting))
        output = make_output(plan, self.max_num_scheduled_tokens, self.finished_req_ids,
                             self.prev_step_scheduled_req_ids)
        output.scheduled_encoder_inputs = plan.encoder_inputs
        if plan.encoder_inputs and self.log_stats and \
                self.scheduler_config.log_iteration_details:
            output.scheduled_encoder_input_stats = self._encoder_input_stats(plan.encoder_inputs)
        if self.preempted_between_steps:
            output.preempted_req_ids = (output.preempted_req_ids or set()) | \
                self.preempted_between_steps
            self.preempted_between_steps = set()
        output.free_encoder_mm_hashes = self.encoder_cache.get_freed_mm_hashes()
        self._issue_block_copies(output)  # (before the connector: it sees the copies)
        if self.has_connector:
            output.boundary_states = self.kv_cache_manager.take_boundary_states()
            output.kv_connector_metadata = (
                self.connector.build_connector_meta(output) if self.connector is not None
                else OffloadMetadata())
        if self.defer_block_free and output.total_num_scheduled_tokens > 0:  # (a connector's)
            self.sched_step_seq += 1
        self.cadence.step_done(output.total_num_scheduled_tokens,
                               plan.prefill_scheduled or plan.prefill_admitted)
        self._update_after_schedule(output)
        if self.tracer is not None:
            trace_points.decision(self.tracer, output)
        return output

    def _running_chunk(self, request: Request, threshold: int, token_budget: int) -> int:
        """Tokens a running request computes this step (0: skip it).

        | start from            | tokens not computed yet, drafts and async placeholders too  |
        | long-prefill cap      | `threshold` (0 unless requests compete)                     |
        | budget                | what the step has left                                       |
        | context               | max_model_len - computed - the token sampled after (none    |
        |                       | for a pooling model)                                         |
        """
        num_computed = request.num_computed_tokens
        num_new = (request.num_tokens + len(request.spec_token_ids)
                   + request.num_output_placeholders - num_computed)
        if 0 < threshold < num_new:
            num_new = threshold
        # Comparisons, not a three-argument min(): compiled, that is a call of the builtin on
        # boxed ints (3.5% of a whole-trace replay, perf).
        if token_budget < num_new:
            num_new = token_budget
        context_room = self.max_model_len - self.num_sampled_tokens_per_step - num_computed
        if context_room < num_new:
            num_new = context_room
        return num_new if self.mamba_split is None else self.mamba_split.clip(request, num_new)

    def _schedule_running(self, plan: StepPlan, hold_prefill: bool) -> None:
        """Each running request in order gets its chunk, while the budget lasts. When the pool
        cannot hold a chunk, the policy's victim is preempted and the allocation retried; a
        victim scheduled earlier in this step gives its tokens back, and a victim before the
        loop's position moves the position back with it. Preempting the request itself ends
        the phase (0.32; from 0.33 a priority request that preempts itself is skipped and the
        more important ones after it still get their chunks)."""
        kv = self.kv_cache_manager
        threshold = self._prefill_threshold()
        running = self.running
        index = 0
        while index < len(running) and plan.token_budget > 0:
            request = running[index]
            if request.num_output_placeholders and self._nothing_left_to_schedule(request):
                index += 1
                continue
            if hold_prefill and request.is_prefill_chunk:
                index += 1  # its next chunk waits for a step that carries prefill
                continue
            num_new = self._running_chunk(request, threshold, plan.token_budget)
            if request.mm_features:
                num_new = self.choose_encoder_inputs(plan, request, request.num_computed_tokens,
                                                     num_new)
            if self.prefill_lookahead > 1:  # a chain of MTP modules
                num_new = reserve_prefill_lookahead(request, request.num_computed_tokens,
                                                    num_new, self.prefill_lookahead)
            if num_new <= 0:
                index += 1
                continue
            blocks = kv.allocate_slots(request, num_new,
                                       num_lookahead_tokens=self.num_lookahead_tokens)
            while blocks is None:
                victim_index = self._victim_index(index)
                if not self._request_blocks_can_be_freed(running[victim_index]):
                    break  # its blocks would come back only after a step in flight: no use
                victim = running.pop(victim_index)
                if victim_index < index:
                    index -= 1
                if victim in plan.scheduled_running:
                    plan.take_back(victim)
                self._preempt_request(victim)
                plan.preempted.append(victim)
                if victim is request:
                    break
                blocks = kv.allocate_slots(request, num_new,
                                           num_lookahead_tokens=self.num_lookahead_tokens)
            if blocks is None:  # the request preempted itself, or no victim could help
                if (request.status == RequestStatus.PREEMPTED and self.policy == "priority"
                        and self.behaviour.priority_self_preemption_continues):
                    continue  # it left `running`: `index` already points at the next one
                return
            plan.scheduled_running.append(request)
            plan.prefill_scheduled |= request.is_prefill_chunk
            plan.schedule(request, num_new, blocks)
            if request.mm_features:
                self.commit_encoder_inputs(plan, request)
            index += 1
            if request.spec_token_ids:
                self._take_drafts(plan, request, num_new)

    def _take_drafts(self, plan: StepPlan, request: Request, num_new: int) -> None:
        """The drafts a scheduled chunk reaches are verified this step; the rest are dropped
        (the drafter proposes anew after the step)."""
        num_spec = (num_new + request.num_computed_tokens - request.num_tokens
                    - request.num_output_placeholders)
        if num_spec > 0:
            plan.spec_tokens[request.request_id] = request.spec_token_ids[:num_spec]
        request.spec_token_ids = []

    def _nothing_left_to_schedule(self, request: Request) -> bool:
        """Async scheduling: the in-flight step already reaches max_tokens (drafts rejected)."""
        return (request.num_output_placeholders > 0
                and request.num_computed_tokens + 2 - request.num_output_placeholders
                >= request.num_prompt_tokens + request.max_tokens)

    def _update_after_schedule(self, output: SchedulerOutput) -> None:
        requests = self.requests
        for req_id, num in output.num_scheduled_tokens.items():
            request = requests[req_id]
            request.num_computed_tokens += num
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders)
            if self.has_connector:
                request.last_sched_seq = self.sched_step_seq
                if not request.is_prefill_chunk:
                    self.inflight_prefills.pop(req_id, None)
        self.prev_step_scheduled_req_ids = set(output.num_scheduled_tokens)
        self.finished_req_ids = set()


    def take_events(self) -> list[KVCacheEvent]:
        """KV events since the last call: those the last update published (the GPU pool's,
        then the connector tier's), then the GPU pool's since. The connector's since stay
        with it until the next update publishes them, as upstream's do."""
        events, self.published_events = self.published_events, []
        events.extend(self.kv_cache_manager.take_events())
        return events
