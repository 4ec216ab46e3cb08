"""`SchedulerState`: every attribute the scheduler's parts share, declared once.

The scheduler is one class built from mixins (connector paths, updates, preemption, admission
rules), each a mypyc trait that reads attributes `Scheduler.__init__` sets. They all derive
from this trait, so "where is `waiting` declared?" has one answer, and the modules that only
read a scheduler (the integrity check, the tracer's trace points) take a `SchedulerState`
instead of importing the `Scheduler` that imports them.

| group                 | attributes                                                         |
| --------------------- | ------------------------------------------------------------------ |
| queues and requests   | requests, running, waiting, kv_holding_waiting, deferred_waiting,  |
|                       | finished_req_ids, inflight_prefills                                |
| limits                | max_model_len, max_num_running_reqs, max_num_scheduled_tokens,     |
|                       | num_spec_tokens, num_lookahead_tokens, num_sampled_tokens_per_step |
| configuration         | scheduler_config, behaviour, policy, continuum                     |
| KV cache              | kv_cache_manager                                                   |
| encoder (multimodal)  | encoder_cache, max_num_encoder_input_tokens,                       |
|                       | encoder_cache_mismatch_reqs, is_encoder_decoder                    |
| connector paths       | has_connector, defer_block_free, processed_step_seq,               |
|                       | sched_step_seq, deferred_frees, recompute_kv_load_failures,        |
|                       | finished/failed_recving_kv_req_ids                                 |
| counters              | num_preemptions, spec_decoding_stats (of the last update)           |
| operator              | pause_state, prev_step_scheduled_req_ids, preempted_between_steps  |
| streaming sessions    | num_waiting_for_streaming_input                                    |
| structured output     | grammar_compile_error_reqs                                         |
"""

from __future__ import annotations

from collections import deque

from mypy_extensions import trait

from impl.behaviour import Behaviour
from impl.core.block import KVCacheBlock
from impl.core.events import KVCacheEvent
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.prefix_stats import PrefixCacheStats
from impl.sched.config import SchedulerConfig
from impl.sched.continuum.policy import ContinuumPolicy
from impl.sched.encoder_cache import EncoderCacheManager
from impl.sched.pause import PauseState
from impl.sched.request import Request
from impl.sched.request_queue import FCFSRequestQueue, PriorityRequestQueue
from impl.sched.spec_stats import SpecDecodingStats


@trait
class SchedulerState:
    requests: dict[str, Request]
    running: list[Request]
    waiting: FCFSRequestQueue | PriorityRequestQueue
    kv_holding_waiting: FCFSRequestQueue | PriorityRequestQueue
    deferred_waiting: set[str]
    finished_req_ids: set[str]
    inflight_prefills: dict[str, Request]
    max_model_len: int
    max_num_running_reqs: int
    max_num_scheduled_tokens: int
    num_sampled_tokens_per_step: int
    num_spec_tokens: int
    num_lookahead_tokens: int
    prefill_lookahead: int  # prompt tokens past a chunk the drafter reads (`SchedulerConfig`)
    scheduler_config: SchedulerConfig
    behaviour: Behaviour
    policy: str
    continuum: ContinuumPolicy | None
    kv_cache_manager: KVCacheManager
    encoder_cache: EncoderCacheManager
    max_num_encoder_input_tokens: int
    encoder_cache_mismatch_reqs: set[str]
    is_encoder_decoder: bool
    has_connector: bool
    defer_block_free: bool
    processed_step_seq: int
    sched_step_seq: int
    deferred_frees: deque[tuple[int, list[KVCacheBlock]]]
    recompute_kv_load_failures: bool
    finished_recving_kv_req_ids: set[str]
    failed_recving_kv_req_ids: set[str]
    num_preemptions: int
    pause_state: PauseState
    prev_step_scheduled_req_ids: set[str]
    preempted_between_steps: set[str]
    spec_decoding_stats: SpecDecodingStats | None
    log_stats: bool
    connector_prefix_cache_stats: PrefixCacheStats | None  # beside a connector, stats on
    num_waiting_for_streaming_input: int
    grammar_compile_error_reqs: set[str]  # ids; finished with an error after the step
    # KV events handed out at the end of the last update, as upstream publishes its batch: the
    # GPU pool's so far, then the connector's tier's (`Scheduler.take_events`).
    published_events: list[KVCacheEvent]
