"""`LLMEngine`: the scheduler twin and the model runner in one loop.

step() = schedule -> execute -> update: the scheduler decides how many tokens each request
computes (chunked prefill, prefix-cache hits, preemption), the runner computes them and samples,
the scheduler appends the tokens and decides who stopped. With `num_spec_tokens` > 0 the runner
also proposes n-gram drafts after each step, which the next step verifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from impl.core.hashing import make_none_hash
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import KVCacheConfig
from impl.runner.attention_backend import default_device, resolve_backend_name
from impl.runner.kv_cache import blocks_per_request, model_kv_cache_config
from impl.runner.model import LlamaForCausalLM
from impl.runner.model_runner import ModelRunner
from impl.runner.sampling_params import SamplingParams
from impl.sched.config import SchedulerConfig
from impl.sched.output import EngineCoreOutput
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class EngineArgs:
    block_size: int = 16
    num_blocks: int | None = None  # None: max_num_seqs full-length requests fit (+ null block)
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = True
    num_spec_tokens: int = 0
    attention_backend: str = "auto"  # auto | torch | triton | cpu | native
    device: str | None = None  # None: cuda when available, else cpu
    seed: int = 0
    hash_algo: str = "sha256"


@dataclass(frozen=True, slots=True)
class RequestOutput:
    request_id: str
    token_ids: list[int]
    finish_reason: str | None
    num_cached_tokens: int  # prompt tokens served by the prefix cache at first scheduling


class LLMEngine:
    def __init__(self, model_dir: str | Path, args: EngineArgs | None = None, *,
                 kv_cache_config: KVCacheConfig | None = None) -> None:
        """`kv_cache_config` replaces the planned layout (the KV-cache planner's groups for the
        model's layers, `num_blocks` blocks): e.g. to run a Llama over a hybrid layout."""
        args = args or EngineArgs()
        self.device = torch.device(args.device) if args.device else default_device()
        self.backend = resolve_backend_name(args.attention_backend, self.device)
        self.model = LlamaForCausalLM.from_pretrained(model_dir, self.device, self.backend)
        config = self.model.config
        max_model_len = args.max_model_len or config.max_position_embeddings
        if max_model_len > config.max_position_embeddings:
            raise ValueError(f"max_model_len {max_model_len} exceeds the model's "
                             f"max_position_embeddings {config.max_position_embeddings}")
        num_blocks = args.num_blocks or args.max_num_seqs * blocks_per_request(
            config, args.block_size, max_model_len, args.max_num_batched_tokens)
        kv_config = kv_cache_config or model_kv_cache_config(
            config, num_blocks + (args.num_blocks is None), args.block_size)
        if set(kv_config.block_sizes) != {args.block_size}:
            raise ValueError(f"kv_cache_config block sizes {kv_config.block_sizes} differ from "
                             f"block_size {args.block_size}")
        self.scheduler_config = SchedulerConfig(
            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=max_model_len,
            long_prefill_token_threshold=args.long_prefill_token_threshold,
            enable_prefix_caching=args.enable_prefix_caching,
            num_spec_tokens=args.num_spec_tokens, hash_algo=args.hash_algo,
            block_size=args.block_size)
        none_hash = make_none_hash(args.hash_algo, str(args.seed))
        self.scheduler = Scheduler(self.scheduler_config, kv_config, none_hash=none_hash,
                                   log_stats=True)
        self.hasher = RequestBlockHasher(args.block_size, args.hash_algo, none_hash)
        self.runner = ModelRunner(self.model, kv_config, max_num_reqs=args.max_num_seqs,
                                  max_model_len=max_model_len, device=self.device,
                                  num_spec_tokens=args.num_spec_tokens, seed=args.seed)
        self.num_spec_tokens = args.num_spec_tokens
        self.num_blocks = kv_config.num_blocks
        # Per request id, until `generate` collects them.
        self.requests: dict[str, Request] = {}
        self.outputs: dict[str, list[int]] = {}
        self.finish_reasons: dict[str, str] = {}
        self.num_steps = 0
        self.last_num_scheduled_tokens = 0
        self._next_id = 0

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int],
                    params: SamplingParams | None = None) -> None:
        params = params or SamplingParams()
        if not prompt_token_ids:
            raise ValueError(f"request {request_id!r}: empty prompt")
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt_token_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"request {request_id!r}: token id {bad[0]} outside the "
                             f"vocabulary [0, {vocab})")
        if len(prompt_token_ids) >= self.scheduler_config.max_model_len:
            raise ValueError(f"request {request_id!r}: prompt of {len(prompt_token_ids)} tokens "
                             f"leaves no room under max_model_len "
                             f"{self.scheduler_config.max_model_len}")
        eos = self.model.config.eos_token_id
        request = Request(request_id, prompt_token_ids, max_tokens=params.max_tokens,
                          stop_token_ids=params.stop_token_ids,
                          eos_token_id=eos, ignore_eos=params.ignore_eos,
                          block_hasher=self.hasher)
        self.scheduler.add_request(request)
        self.requests[request_id] = request
        self.runner.add_request_params(request_id, params, None if params.ignore_eos else eos)
        self.outputs[request_id] = []

    def abort(self, request_id: str) -> None:
        self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
        self.finish_reasons.setdefault(request_id, "abort")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def step(self) -> list[EngineCoreOutput]:
        scheduler_output = self.scheduler.schedule()
        self.num_steps += 1
        self.last_num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens
        runner_output = self.runner.execute_model(scheduler_output)
        results = self.scheduler.update_from_output(scheduler_output, runner_output)
        for result in results:
            self.outputs[result.request_id].extend(result.new_token_ids)
            if result.finish_reason is not None:
                self.finish_reasons[result.request_id] = result.finish_reason
        if self.num_spec_tokens > 0:
            sampled = [r for r, ids in zip(runner_output.req_ids,
                                           runner_output.sampled_token_ids, strict=True)
                       if ids and r not in self.finish_reasons]
            self.scheduler.update_draft_token_ids(self.runner.propose_drafts(sampled))
        return results

    def generate(self, prompts: Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """Run prompts to completion; outputs in prompt order."""
        per_prompt = (list(params) if isinstance(params, Sequence)
                      else [params or SamplingParams()] * len(prompts))
        if len(per_prompt) != len(prompts):
            raise ValueError(f"{len(per_prompt)} sampling params for {len(prompts)} prompts")
        ids = [str(self._next_id + i) for i in range(len(prompts))]
        self._next_id += len(prompts)
        for req_id, prompt, p in zip(ids, prompts, per_prompt, strict=True):
            self.add_request(req_id, prompt, p)
        while any(r not in self.finish_reasons for r in ids):
            self.step()
            if self.last_num_scheduled_tokens == 0 and self.has_unfinished_requests():
                # Nothing runs and nothing can be admitted: no step will ever free a block.
                raise RuntimeError("no request fits in the KV cache "
                                   f"({self.num_blocks} blocks): raise num_blocks or lower "
                                   "max_model_len")
        return [RequestOutput(r, self.outputs.pop(r), self.finish_reasons.pop(r),
                              max(self.requests.pop(r).num_cached_tokens, 0)) for r in ids]
