"""The generation workloads every system runs: the same prompts under the same engine limits.

Each one is shaped to force one scheduler path through the model runner: chunked prefill (a
token budget smaller than the prompts), preemption (fewer KV blocks than the requests need, so
requests are evicted and recomputed from their resumed block tables), prefix-cache hits (prompts
sharing whole blocks, admitted after the first has cached them). Block size 32: upstream's CPU
engine rejects sizes that are not multiples of 32.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunnerWorkload:
    name: str
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    num_blocks: int  # including the null block, like upstream's num_gpu_blocks_override
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = 32


def _prompt(rng: random.Random, length: int, vocab: int = 512) -> tuple[int, ...]:
    return tuple(rng.randrange(3, vocab) for _ in range(length))


def chunked_prefill() -> RunnerWorkload:
    rng = random.Random(1)
    prompts = tuple(_prompt(rng, n) for n in (70, 45, 97, 5, 33))
    return RunnerWorkload("chunked-prefill", prompts, max_tokens=12, num_blocks=40,
                          max_num_seqs=4, max_num_batched_tokens=32, max_model_len=256)


def preemption() -> RunnerWorkload:
    rng = random.Random(2)
    prompts = tuple(_prompt(rng, n) for n in (40, 52, 36, 60, 44))
    return RunnerWorkload("preemption", prompts, max_tokens=48, num_blocks=8, max_num_seqs=4,
                          max_num_batched_tokens=128, max_model_len=128)


def prefix_hits() -> RunnerWorkload:
    rng = random.Random(3)
    shared = _prompt(rng, 64)  # two full blocks
    prompts = tuple(shared + _prompt(rng, n) for n in (9, 17, 3, 30))
    return RunnerWorkload("prefix-hits", prompts, max_tokens=10, num_blocks=40, max_num_seqs=4,
                          max_num_batched_tokens=80, max_model_len=256)


WORKLOADS = {w.name: w for w in (chunked_prefill(), preemption(), prefix_hits())}
