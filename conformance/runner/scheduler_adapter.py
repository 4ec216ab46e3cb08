"""`ImplSchedulerAdapter`: impl's scheduler twin inside upstream vLLM's engine (`scheduler_cls`).

Upstream's EngineCore talks to its scheduler through a small interface: add requests, schedule,
update from the model runner's output, finish (abort) requests, report counts. This adapter
answers it with `impl.sched.Scheduler`, translating requests in and outputs out. Upstream's own
model runner then executes impl's schedules, so equal tokens show that impl's scheduler outputs
are complete and well-formed for a real worker (block tables, resumed requests, token ids).

vLLM is imported lazily (module import stays cheap and vllm-free); the class deliberately does
not subclass upstream's `SchedulerInterface`: the engine only duck-types it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from impl.core.hashing import make_none_hash
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from impl.sched.config import SchedulerConfig
from impl.sched.output import DraftTokenIds, ModelRunnerOutput
from impl.sched.output import SchedulerOutput as ImplSchedulerOutput
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler


def impl_kv_cache_config(upstream: Any) -> KVCacheConfig:
    """Full-attention groups only: the tiny Llama models the runner tests use."""
    groups = []
    for index, group in enumerate(upstream.kv_cache_groups):
        spec = group.kv_cache_spec
        if type(spec).__name__ != "FullAttentionSpec":
            raise ValueError(f"kv_cache_groups[{index}]: {type(spec).__name__} is not adapted")
        groups.append(KVCacheGroupSpec(tuple(group.layer_names), FullAttentionSpec(
            block_size=spec.block_size, num_kv_heads=spec.num_kv_heads,
            head_size=spec.head_size, dtype=str(spec.dtype).removeprefix("torch."))))
    return KVCacheConfig(upstream.num_blocks, tuple(groups))


class ImplSchedulerAdapter:
    connector: Any = None
    ec_connector: Any = None

    def __init__(self, vllm_config: Any, kv_cache_config: Any, structured_output_manager: Any,
                 block_size: int, hash_block_size: int | None = None, mm_registry: Any = None,
                 include_finished_set: bool = False, log_stats: bool = False) -> None:
        from vllm.v1.core.sched.interface import PauseState

        sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
        spec = vllm_config.speculative_config
        # The engine core hands over the scheduler's block (DCP's share of every rank
        # included); the twin takes the per-rank block and the DCP size.
        dcp = vllm_config.parallel_config.decode_context_parallel_size
        config = SchedulerConfig(
            max_num_seqs=sched.max_num_seqs, max_num_batched_tokens=sched.max_num_batched_tokens,
            max_model_len=vllm_config.model_config.max_model_len,
            long_prefill_token_threshold=sched.long_prefill_token_threshold,
            enable_chunked_prefill=sched.enable_chunked_prefill, policy=sched.policy,
            num_spec_tokens=spec.num_speculative_tokens if spec is not None else 0,
            enable_prefix_caching=bool(cache.enable_prefix_caching),
            hash_algo=cache.prefix_caching_hash_algo, block_size=block_size // dcp,
            hash_block_size=hash_block_size, decode_context_parallel_size=dcp)
        none_hash = make_none_hash(config.hash_algo, os.environ.get("PYTHONHASHSEED"))
        self.impl = Scheduler(config, impl_kv_cache_config(kv_cache_config), none_hash=none_hash,
                              log_stats=log_stats)
        self.hasher = RequestBlockHasher(config.effective_hash_block_size, config.hash_algo,
                                         none_hash)
        self.upstream_requests: dict[str, Any] = {}
        self.pending: dict[int, ImplSchedulerOutput] = {}
        self.pause_state: Any = PauseState.UNPAUSED

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        params = request.sampling_params
        self.upstream_requests[request.request_id] = request
        self.impl.add_request(Request(
            request.request_id, list(request.prompt_token_ids), max_tokens=request.max_tokens,
            stop_token_ids=params.stop_token_ids or (),
            eos_token_id=params.eos_token_id, ignore_eos=params.ignore_eos,
            priority=request.priority, arrival_time=request.arrival_time,
            cache_salt=request.cache_salt, block_hasher=self.hasher))

    def finish_requests(self, request_ids: str | Iterable[str] | None,
                        finished_status: Any) -> list[Any]:
        ids = list(self.impl.requests) if request_ids is None else request_ids
        finished = self.impl.finish_requests(ids, RequestStatus[finished_status.name])
        upstream = []
        for request in finished:
            original = self.upstream_requests.pop(request.request_id)
            original.status = finished_status
            upstream.append(original)
        return upstream

    # -- one step ---------------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False) -> Any:
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

        out = self.impl.schedule()
        new = [NewRequestData(
            req_id=r.req_id, prompt_token_ids=list(r.prompt_token_ids), mm_features=[],
            sampling_params=self.upstream_requests[r.req_id].sampling_params,
            pooling_params=None, block_ids=r.block_ids, num_computed_tokens=r.num_computed_tokens,
            lora_request=None) for r in out.scheduled_new_reqs]
        c = out.scheduled_cached_reqs
        cached = CachedRequestData(
            req_ids=list(c.req_ids), resumed_req_ids=set(c.resumed_req_ids), new_token_ids=[],
            all_token_ids=dict(c.all_token_ids), new_block_ids=list(c.new_block_ids),
            num_computed_tokens=list(c.num_computed_tokens),
            num_output_tokens=list(c.num_output_tokens))
        upstream = SchedulerOutput(
            scheduled_new_reqs=new, scheduled_cached_reqs=cached,
            num_scheduled_tokens=dict(out.num_scheduled_tokens),
            total_num_scheduled_tokens=out.total_num_scheduled_tokens,
            scheduled_spec_decode_tokens=dict(out.scheduled_spec_decode_tokens),
            scheduled_encoder_inputs={}, finished_req_ids=set(out.finished_req_ids),
            free_encoder_mm_hashes=[], preempted_req_ids=set(out.preempted_req_ids or ()))
        self.pending[id(upstream)] = out
        return upstream

    def get_grammar_bitmask(self, scheduler_output: Any) -> None:
        """No structured output in these runs."""

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> dict[int, Any]:
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

        out = self.pending.pop(id(scheduler_output))
        runner_output = ModelRunnerOutput(
            list(model_runner_output.req_ids), dict(model_runner_output.req_id_to_index),
            [[int(t) for t in ids] for ids in model_runner_output.sampled_token_ids])
        outputs: dict[int, list[Any]] = {}
        for result in self.impl.update_from_output(out, runner_output):
            upstream = self.upstream_requests[result.request_id]
            reason = None
            if result.finish_reason is not None:
                reason = FinishReason[result.finish_reason.upper()]
                self.upstream_requests.pop(result.request_id)
            outputs.setdefault(upstream.client_index, []).append(EngineCoreOutput(
                request_id=result.request_id, new_token_ids=list(result.new_token_ids),
                finish_reason=reason, stop_reason=result.stop_reason))
        return {client: EngineCoreOutputs(outputs=outs) for client, outs in outputs.items()}

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        self.impl.update_draft_token_ids(DraftTokenIds(
            list(draft_token_ids.req_ids), [list(d) for d in draft_token_ids.draft_token_ids]))

    def update_draft_token_ids_in_output(self, draft_token_ids: Any,
                                         scheduler_output: Any) -> None:
        raise NotImplementedError("async scheduling is not adapted")

    # -- state ------------------------------------------------------------------------------
    def get_num_unfinished_requests(self) -> int:
        return self.impl.get_num_unfinished_requests()

    def has_unfinished_requests(self) -> bool:
        return self.impl.has_unfinished_requests()

    def has_finished_requests(self) -> bool:
        return self.impl.has_finished_requests()

    def has_requests(self) -> bool:
        return self.has_unfinished_requests() or self.has_finished_requests()

    def get_request_counts(self) -> tuple[int, int]:
        return self.impl.get_request_counts()

    def get_kv_cache_usage(self) -> float:
        return self.impl.get_kv_cache_usage()

    def set_pause_state(self, pause_state: Any) -> None:
        self.pause_state = pause_state

    def reset_prefix_cache(self, reset_running_requests: bool = False,
                           reset_connector: bool = False) -> bool:
        return self.impl.reset_prefix_cache()

    def reset_encoder_cache(self) -> None:
        """No encoder."""

    def make_stats(self, *args: Any, **kwargs: Any) -> None:
        """Stats are not translated (the runs that use this adapter disable them)."""

    def get_kv_connector(self) -> None:
        return None

    def get_ec_connector(self) -> None:
        return None

    def get_kv_event_publisher_config(self) -> None:
        return None

    def shutdown(self) -> None:
        """Nothing to release."""
