"""Paged-attention test cases shared by the in-process tests and the Triton interpreter run.

`python -m tests.runner.attention_cases [MODEL_DIR...]` (with TRITON_INTERPRET=1) prints, as
JSON, the max abs difference between the Triton kernel and the torch reference for every case
(and, given checkpoints, the engine's tokens on both backends for each): the interpreter has to
be switched on before triton is first imported, so it runs in its own process.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

import torch

from impl.runner.attention_metadata import AttentionMetadata, head_major, write_to_paged_cache
from impl.runner.attention_torch import torch_paged_attention


@dataclass(frozen=True)
class Case:
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    num_kv_heads: int = 2
    queries_per_kv: int = 2
    head_dim: int = 32
    block_size: int = 16
    window: int = 0
    chunk: int = 0

    @property
    def scale(self) -> float:
        return float(self.head_dim ** -0.5)


CASES = {
    "prefill": Case(query_lens=(16, 7), seq_lens=(16, 7)),
    "decode": Case(query_lens=(1, 1, 1), seq_lens=(33, 1, 16)),
    "mixed-ragged": Case(query_lens=(5, 1, 17, 1, 3), seq_lens=(5, 30, 40, 3, 19)),
    "decodes-then-prefill": Case(query_lens=(1, 1, 9), seq_lens=(20, 5, 30), window=0),
    "chunked-prefill": Case(query_lens=(12,), seq_lens=(45,)),
    "mha": Case(query_lens=(9, 1), seq_lens=(9, 20), queries_per_kv=1),
    "gqa-4": Case(query_lens=(6, 1), seq_lens=(6, 21), num_kv_heads=1, queries_per_kv=4),
    "gqa-3-odd-dims": Case(query_lens=(4, 1), seq_lens=(10, 7), queries_per_kv=3, head_dim=24,
                           block_size=6),
    "sliding-window": Case(query_lens=(20, 1), seq_lens=(40, 37), window=7),
    # Chunks of 8 (off the 16-token block grid): a prefill crossing three chunk boundaries,
    # a decode right after a boundary, a chunk continued mid-prefill; then chunks of a block.
    "chunked-local": Case(query_lens=(20, 1, 5), seq_lens=(40, 33, 13), chunk=8),
    "chunked-local-block": Case(query_lens=(1, 30), seq_lens=(47, 50), chunk=16,
                                queries_per_kv=4, num_kv_heads=1),
}


class Setup(NamedTuple):
    query: torch.Tensor  # [num_tokens, num_heads, head_dim]
    kv_cache: torch.Tensor  # [num_blocks, 2, block_size, num_kv_heads, head_dim]
    meta: AttentionMetadata
    dense: list[tuple[torch.Tensor, torch.Tensor]]  # per request: K, V [seq_len, kv_heads, d]


def setup(case: Case, device: str, seed: int = 0) -> Setup:
    """Random K/V per request written through a shuffled block table into a cache full of
    stale random data (so reading a wrong page shows)."""
    gen = torch.Generator().manual_seed(seed)
    bs, hkv, d = case.block_size, case.num_kv_heads, case.head_dim
    blocks_per_req = [-(-s // bs) for s in case.seq_lens]
    num_blocks = sum(blocks_per_req) + 3
    free = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()  # shuffled, no block 0
    table = torch.zeros(len(case.seq_lens), max(blocks_per_req), dtype=torch.int32)
    kv_cache = head_major(torch.randn(num_blocks, 2, hkv, bs, d, generator=gen), bs)
    dense = []
    for i, seq_len in enumerate(case.seq_lens):
        ids = [free.pop() for _ in range(blocks_per_req[i])]
        table[i, :len(ids)] = torch.tensor(ids)
        k = torch.randn(seq_len, hkv, d, generator=gen)
        v = torch.randn(seq_len, hkv, d, generator=gen)
        slots = torch.tensor([ids[p // bs] * bs + p % bs for p in range(seq_len)])
        write_to_paged_cache(k, v, kv_cache, slots)
        dense.append((k, v))
    query = torch.randn(sum(case.query_lens), hkv * case.queries_per_kv, d, generator=gen)
    qsl = [0, *torch.tensor(case.query_lens).cumsum(0).tolist()]
    meta = AttentionMetadata(
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(case.seq_lens, dtype=torch.int32, device=device),
        block_table=table.to(device), slot_mapping=torch.zeros(0, dtype=torch.long),
        query_lens_host=case.query_lens, seq_lens_host=case.seq_lens, block_size=bs,
        sliding_window=case.window, attention_chunk_size=case.chunk)
    return Setup(query.to(device), kv_cache.to(device), meta, dense)


def dense_attention(s: Setup, case: Case) -> torch.Tensor:
    """Plain causal (windowed or chunked) attention over each request's contiguous K/V."""
    outputs, start = [], 0
    for (k, v), q_len, s_len in zip(s.dense, case.query_lens, case.seq_lens, strict=True):
        q = s.query[start:start + q_len].cpu().transpose(0, 1)  # [heads, q_len, d]
        k = k.repeat_interleave(case.queries_per_kv, 1).transpose(0, 1)
        v = v.repeat_interleave(case.queries_per_kv, 1).transpose(0, 1)
        q_pos = torch.arange(s_len - q_len, s_len)[:, None]
        k_pos = torch.arange(s_len)[None, :]
        mask = k_pos <= q_pos
        if case.window:
            mask &= q_pos - k_pos < case.window
        if case.chunk:
            mask &= k_pos // case.chunk == q_pos // case.chunk
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                               scale=case.scale)
        outputs.append(out.transpose(0, 1))
        start += q_len
    return torch.cat(outputs)


def triton_vs_reference(device: str, seed: int = 1) -> dict[str, float]:
    from impl.runner.attention_triton import triton_paged_attention

    diffs = {}
    for name, case in CASES.items():
        s = setup(case, device, seed)
        expected = torch_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
        out = triton_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
        diffs[name] = float((out - expected).abs().max())
    return diffs


def engine_tokens(model_dir: str, backend: str) -> list[list[int]]:
    """A short mixed workload (chunked prefill, then batched decodes) through the engine."""
    from impl.engine import EngineArgs, LLMEngine
    from impl.runner.sampling_params import SamplingParams

    engine = LLMEngine(model_dir, EngineArgs(max_num_seqs=2, max_num_batched_tokens=16,
                                             max_model_len=64, device="cpu",
                                             attention_backend=backend))
    prompts = [list(range(3, 23)), [5, 6, 7]]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=3, ignore_eos=True))
    return [o.token_ids for o in outputs]


if __name__ == "__main__":
    started = time.perf_counter()
    report: dict[str, object] = {"max_abs_diff": triton_vs_reference("cpu")}
    if len(sys.argv) > 1:  # checkpoint directories: compare the engine on both backends
        report["engine"] = {b: engine_tokens(sys.argv[1], b) for b in ("torch", "triton")}
        report["engines"] = {d: {b: engine_tokens(d, b) for b in ("torch", "triton")}
                             for d in sys.argv[2:]}
    report["seconds"] = time.perf_counter() - started
    print(json.dumps(report))
