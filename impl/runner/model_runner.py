"""`ModelRunner`: executes one `SchedulerOutput` and returns the sampled tokens.

execute_model = apply the scheduler's decisions to the persistent batch, build the step's inputs
(token ids, positions, per-group slot mappings and block tables), run the model once over the
flat batch, compute logits only where a token is sampled, then sample (or verify drafts) and
append the new tokens to the batch so the next decode step needs nothing from the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from impl.core.specs import ChunkedLocalAttentionSpec, KVCacheConfig, SlidingWindowSpec
from impl.runner.input_batch import InputBatch
from impl.runner.kv_cache import allocate_kv_caches, attention_specs, check_model_layers
from impl.runner.model import LlamaForCausalLM
from impl.runner.ngram import propose_ngram
from impl.runner.request_state import RequestState, make_generator
from impl.runner.sampler import sample
from impl.runner.sampling_params import SamplingParams
from impl.runner.spec_decode import verify
from impl.runner.state_update import apply_scheduler_output
from impl.runner.step_inputs import StepInputs, build_step_inputs
from impl.sched.output import DraftTokenIds, ModelRunnerOutput, NewRequestData, SchedulerOutput

_GREEDY = SamplingParams()


def local_attention(config: KVCacheConfig) -> tuple[list[int], list[int]]:
    """Per group: the sliding window (0: none) and the attention chunk (0: none)."""
    specs = attention_specs(config)
    return ([s.sliding_window if isinstance(s, SlidingWindowSpec) else 0 for s in specs],
            [s.attention_chunk_size if isinstance(s, ChunkedLocalAttentionSpec) else 0
             for s in specs])


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv_cache_config: KVCacheConfig, *,
                 max_num_reqs: int, max_model_len: int, device: torch.device,
                 num_spec_tokens: int = 0, seed: int = 0) -> None:
        config = model.config
        check_model_layers(kv_cache_config, config)
        self.model = model
        self.device = device
        self.num_spec_tokens = num_spec_tokens
        self.windows, self.chunks = local_attention(kv_cache_config)
        self.kv_caches = allocate_kv_caches(kv_cache_config, device)
        names = [config.layer_name(i) for i in range(config.num_hidden_layers)]
        self.layer_caches = [self.kv_caches.layers[name] for name in names]
        self.layer_groups = [self.kv_caches.layer_group[name] for name in names]
        self.batch = InputBatch(max_num_reqs, max_model_len + num_spec_tokens + 1,
                                [spec.block_size for spec in attention_specs(kv_cache_config)])
        self.requests: dict[str, RequestState] = {}
        self.params: dict[str, tuple[SamplingParams, int | None]] = {}
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def add_request_params(self, req_id: str, params: SamplingParams,
                           eos_token_id: int | None) -> None:
        """The scheduler's NewRequestData carries no sampling parameters: the engine registers
        them here when it accepts a request (unregistered requests are greedy)."""
        self.params[req_id] = (params, eos_token_id)

    def _new_state(self, new: NewRequestData) -> RequestState:
        params, eos = self.params.get(new.req_id, (_GREEDY, None))
        return RequestState(new.req_id, list(new.prompt_token_ids), [],
                            tuple(list(ids) for ids in new.block_ids), new.num_computed_tokens,
                            params, make_generator(params.seed, self.device), eos)

    # -- one step ---------------------------------------------------------------------------
    def execute_model(self, output: SchedulerOutput) -> ModelRunnerOutput:
        for req_id in output.finished_req_ids:
            self.params.pop(req_id, None)
        apply_scheduler_output(output, self.requests, self.batch, self._new_state)
        if output.total_num_scheduled_tokens == 0:
            return ModelRunnerOutput([], {}, [])
        batch = self.batch
        drafts = output.scheduled_spec_decode_tokens
        # Decodes first: the rows a step touches least are packed together.
        batch.reorder(sorted(batch.req_ids, key=lambda r: output.num_scheduled_tokens[r] > 1
                             + len(drafts.get(r, ()))))
        for row, req_id in enumerate(batch.req_ids):
            if req_id in drafts:
                batch.write_drafts(row, drafts[req_id])
        inputs = build_step_inputs(
            batch, [output.num_scheduled_tokens[r] for r in batch.req_ids],
            [len(drafts.get(r, ())) for r in batch.req_ids], self.windows, self.device,
            self.chunks)
        hidden = self.model(inputs.input_ids, inputs.positions, self.layer_caches,
                            [inputs.metadata[g] for g in self.layer_groups])
        logits = self.model.compute_logits(hidden[inputs.logits_indices])  # [num_logits, vocab]
        sampled = self._sample(inputs, logits, drafts)
        for row, tokens in enumerate(sampled):
            if tokens:
                self.requests[inputs.req_ids[row]].output_token_ids.extend(tokens)
                batch.append_tokens(row, tokens)
        req_ids = list(inputs.req_ids)
        return ModelRunnerOutput(req_ids, {r: i for i, r in enumerate(req_ids)}, sampled)

    def _sample(self, inputs: StepInputs, logits: torch.Tensor,
                drafts: dict[str, list[int]]) -> list[list[int]]:
        """Requests without drafts are sampled together; drafted ones are verified one by one."""
        sampled: list[list[int]] = [[] for _ in inputs.req_ids]
        plain_rows: list[int] = []
        plain_logit_rows: list[int] = []
        start = 0
        for row, (req_id, count) in enumerate(zip(inputs.req_ids, inputs.num_logits,
                                                  strict=True)):
            if count == 0:
                continue
            state = self.requests[req_id]
            if req_id in drafts:
                rows = logits[start:start + count]
                banned = state.banned_token_ids()
                if banned:
                    rows = rows.clone()
                    rows[:, list(banned)] = float("-inf")
                sampled[row] = verify(rows, drafts[req_id], state.params,
                                      self._generator_of(state))
            else:
                plain_rows.append(row)
                plain_logit_rows.append(start)
            start += count
        if plain_rows:
            states = [self.requests[inputs.req_ids[row]] for row in plain_rows]
            if len(plain_logit_rows) < logits.shape[0]:  # else every row: no copy
                logits = logits[plain_logit_rows]
            tokens = sample(logits, [s.params for s in states],
                            [self._generator_of(s) for s in states],
                            [s.banned_token_ids() for s in states],
                            self.model.attention.argmax)
            for row, token in zip(plain_rows, tokens, strict=True):
                sampled[row] = [token]
        return sampled

    def _generator_of(self, state: RequestState) -> torch.Generator:
        """A seeded request's own generator, else the runner's shared one."""
        return state.generator if state.generator is not None else self.generator

    # -- drafts -----------------------------------------------------------------------------
    def propose_drafts(self, req_ids: Sequence[str]) -> DraftTokenIds:
        """n-gram drafts for the given requests (those that just sampled a token)."""
        ids = [r for r in req_ids if r in self.requests]
        return DraftTokenIds(ids, [
            propose_ngram(self.requests[r].all_token_ids, self.num_spec_tokens) for r in ids])
