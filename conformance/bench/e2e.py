"""Engine end to end: a tiny random Llama checkpoint, 32 requests x 128 prompt tokens -> 64
greedy output tokens, measured in output tokens per second.

Both engines load the same checkpoint (written once per process to a temporary directory) and
run in-process: the twin's `impl.engine.LLMEngine` (on CPU its native C attention, or the
batched torch kernel without a compiler, and packed linears; Triton on CUDA; picked by the
engine itself) and upstream's `vllm.LLM`. Block size is 32 because vLLM's CPU attention only
takes multiples of 32. Every run uses fresh
prompts, so neither engine gets a prefix-cache hit from an earlier run, and greedy outputs are
checked identical.
"""

from __future__ import annotations

import importlib.util
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from .measure import Case, Target
from .systems import check_system

NUM_REQUESTS, PROMPT_LEN, OUTPUT_LEN = 32, 128, 64
BLOCK_SIZE = 32
MAX_MODEL_LEN = 256
TINY_CHECKPOINT: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 8192, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def engine_missing() -> str | None:
    """Why the end-to-end case cannot run here, or None if it can."""
    for module in ("impl.engine", "torch", "safetensors"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not available"
    return None


def write_tiny_checkpoint(directory: Path, seed: int = 0) -> Path:
    """config.json + model.safetensors with small random weights (unit norms)."""
    import torch
    from safetensors.torch import save_file

    from impl.runner.config import parse_model_config
    from impl.runner.weights import expected_shapes

    (directory / "config.json").write_text(json.dumps(TINY_CHECKPOINT, indent=1))
    generator = torch.Generator().manual_seed(seed)
    tensors = {name: torch.randn(shape, generator=generator) * 0.05 if len(shape) > 1
               else torch.ones(shape)
               for name, shape in expected_shapes(parse_model_config(TINY_CHECKPOINT)).items()}
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


_CHECKPOINT: list[Any] = []


def tiny_checkpoint() -> Path:
    """One checkpoint per process, deleted when the process exits."""
    if not _CHECKPOINT:
        holder = tempfile.TemporaryDirectory(prefix="vtwin-bench-tiny-")
        _CHECKPOINT.extend([holder, write_tiny_checkpoint(Path(holder.name))])
    return Path(_CHECKPOINT[1])


def prompts(run: int) -> list[list[int]]:
    rng = random.Random(10_000 + run)
    vocab = int(TINY_CHECKPOINT["vocab_size"])
    return [[rng.randrange(3, vocab) for _ in range(PROMPT_LEN)] for _ in range(NUM_REQUESTS)]


class EndToEnd:
    """One engine, built once; each `run()` generates for a fresh batch of prompts."""

    work = NUM_REQUESTS * OUTPUT_LEN

    def __init__(self, system: str) -> None:
        check_system(system)
        self.system = system
        self.runs = 0
        path = tiny_checkpoint()
        if system == "impl":
            from impl.engine import EngineArgs, LLMEngine
            from impl.runner.sampling_params import SamplingParams

            self.engine: Any = LLMEngine(path, EngineArgs(
                block_size=BLOCK_SIZE, max_num_seqs=NUM_REQUESTS,
                max_num_batched_tokens=NUM_REQUESTS * PROMPT_LEN, max_model_len=MAX_MODEL_LEN))
            self.params: Any = SamplingParams(max_tokens=OUTPUT_LEN, ignore_eos=True)
        else:
            from vllm import LLM
            from vllm import SamplingParams as UpstreamParams

            self.engine = LLM(model=str(path), skip_tokenizer_init=True, dtype="float32",
                              enforce_eager=True, max_model_len=MAX_MODEL_LEN,
                              max_num_seqs=NUM_REQUESTS,
                              max_num_batched_tokens=NUM_REQUESTS * PROMPT_LEN,
                              block_size=BLOCK_SIZE, seed=0, kv_cache_memory_bytes=256 << 20)
            self.params = UpstreamParams(max_tokens=OUTPUT_LEN, ignore_eos=True,
                                         temperature=0.0, detokenize=False)
        self.outputs: list[list[int]] = []

    def generate(self, batch: list[list[int]]) -> list[list[int]]:
        if self.system == "impl":
            return [list(o.token_ids) for o in self.engine.generate(batch, self.params)]
        done = self.engine.generate([{"prompt_token_ids": p} for p in batch], self.params,
                                    use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in done]

    def run(self) -> None:
        self.outputs = self.generate(prompts(self.runs))
        expected = _OUTPUTS.setdefault(self.runs, self.outputs)
        if self.outputs != expected:
            raise AssertionError(f"end to end: {self.system} decodes prompt batch {self.runs} "
                                 "differently from the other engine")
        self.runs += 1


_OUTPUTS: dict[int, list[list[int]]] = {}
"""Greedy outputs per prompt batch, from whichever engine ran it first."""


def e2e_cases() -> list[Case]:
    return [Case("engine.e2e[32x128->64]", "tokens/s", EndToEnd, lower_is_better=False,
                 reusable=True, rounds=7, target=Target("speedup_min", 1.0, ">= 1.0x"),
                 note="tiny random Llama checkpoint, greedy (outputs checked identical), block "
                      "size 32, in-process engines; on CPU the twin runs what 'auto' picks (its "
                      "native C attention where a compiler is here, else the batched torch "
                      "kernel) and oneDNN-packed linears against upstream's CPU kernels")]
