"""Running a `RunnerWorkload` on each system: impl's LLMEngine, Hugging Face greedy, upstream
vLLM's engine (optionally with impl's scheduler plugged in). All greedy, EOS ignored: without a
tokenizer upstream has no EOS id, so every system runs to max_tokens.

vLLM is imported inside `upstream_generate` only, with the settings that make an in-process CPU
engine reproducible (no engine subprocess, one OpenMP thread, fp32, eager, request ids kept).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.runner.hf_reference import HFReference
from conformance.runner.workloads import RunnerWorkload

UPSTREAM_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "1",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
}

KV_CACHE_MEMORY_BYTES = 256 << 20  # upstream engine KV cache: far more than tests use


@dataclass(frozen=True, slots=True)
class Generation:
    token_ids: list[list[int]]  # per prompt, in prompt order
    num_preemptions: int = 0
    num_cached_tokens: tuple[int, ...] = ()  # impl only: prefix-cache hit per request


def first_divergence(ours: list[list[int]], theirs: list[list[int]]) -> str:
    """Where two systems' tokens first differ, for a failure message."""
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            position = next((i for i, (x, y) in enumerate(zip(a, b, strict=False))
                             if x != y),
                            min(len(a), len(b)))
            return (f"prompt {index}: first divergence at output position {position}: "
                    f"{a[position:position + 4]} vs {b[position:position + 4]}")
    return "no divergence"


def impl_generate(model_dir: Path, workload: RunnerWorkload, **overrides: Any) -> Generation:
    from impl.engine import EngineArgs, LLMEngine
    from impl.runner.sampling_params import SamplingParams

    args = EngineArgs(block_size=workload.block_size, num_blocks=workload.num_blocks,
                      max_num_seqs=workload.max_num_seqs,
                      max_num_batched_tokens=workload.max_num_batched_tokens,
                      max_model_len=workload.max_model_len, device="cpu", **overrides)
    engine = LLMEngine(model_dir, args)
    outputs = engine.generate(workload.prompts, SamplingParams(max_tokens=workload.max_tokens,
                                                               ignore_eos=True))
    return Generation([o.token_ids for o in outputs], engine.scheduler.num_preemptions,
                      tuple(o.num_cached_tokens for o in outputs))


def hf_generate(reference: HFReference, workload: RunnerWorkload) -> Generation:
    return Generation([reference.greedy(p, workload.max_tokens) for p in workload.prompts])


@contextlib.contextmanager
def _upstream_env() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in UPSTREAM_ENV}
    os.environ.update(UPSTREAM_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def upstream_generate(model_dir: Path, workload: RunnerWorkload,
                      scheduler_cls: str | None = None) -> Generation:
    """One in-process upstream engine per call, torn down before returning."""
    with _upstream_env():
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        llm: Any = LLM(
            model=str(model_dir), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
            block_size=workload.block_size, num_gpu_blocks_override=workload.num_blocks,
            max_model_len=workload.max_model_len, max_num_seqs=workload.max_num_seqs,
            max_num_batched_tokens=workload.max_num_batched_tokens, enable_prefix_caching=True,
            # A fixed KV budget: sized from free memory, the CPU worker's request goes negative
            # once the test process itself holds a few GiB (torch, vllm, earlier tests).
            kv_cache_memory_bytes=KV_CACHE_MEMORY_BYTES, seed=0, scheduler_cls=scheduler_cls)
        try:
            params = SamplingParams(max_tokens=workload.max_tokens, temperature=0.0,
                                    ignore_eos=True)
            outputs = llm.generate([TokensPrompt(prompt_token_ids=list(p))
                                    for p in workload.prompts], params, use_tqdm=False)
            scheduler = llm.llm_engine.engine_core.engine_core.scheduler
            impl_scheduler = getattr(scheduler, "impl", None)
            preemptions = impl_scheduler.num_preemptions if impl_scheduler is not None else -1
            return Generation([list(o.outputs[0].token_ids) for o in outputs], preemptions)
        finally:
            del llm
            gc.collect()
