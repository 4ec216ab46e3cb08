"""Paged attention with the Triton kernel (`triton_kernel`), for mixed prefill + decode batches.

The launcher picks tile sizes and the grid: one program per (request, KV head, query tile), so a
decode-heavy batch launches one program per request and head group. Few, fat programs also keep
the Triton interpreter (TRITON_INTERPRET=1, CPU tensors) fast enough to test.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

import torch

from impl.runner.attention_metadata import AttentionMetadata


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _compiled_kernel(interpret: bool) -> Any:
    """JIT on first use. Note that TRITON_INTERPRET must be set before triton is first imported
    (triton builds its own helpers at import), so set it before the first call."""
    del interpret  # only the cache key: triton reads the environment itself
    from impl.runner import triton_kernel

    return triton_kernel.triton.jit(triton_kernel._paged_attention_kernel)


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def triton_paged_attention(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                           scale: float, block_m: int = 16, block_n: int = 32) -> torch.Tensor:
    # query: [num_tokens, num_heads, head_dim] -> output of the same shape
    # kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim]
    if not triton_available():
        raise RuntimeError("the Triton attention backend needs the triton package")
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = kv_cache.shape[3]
    queries_per_kv = num_heads // num_kv_heads
    output = torch.empty_like(query)
    if num_tokens == 0 or meta.num_reqs == 0:
        return output
    query = query.contiguous()
    block_g = _next_pow2(queries_per_kv)
    block_m = max(block_m, 16 // block_g, 1)  # tl.dot needs >= 16 rows
    block_m = min(block_m, max(_next_pow2(meta.max_query_len), 16 // block_g, 1))
    key_cache, value_cache = kv_cache[:, 0], kv_cache[:, 1]
    block_table = meta.block_table
    grid = (meta.num_reqs, num_kv_heads, -(-meta.max_query_len // block_m))
    _compiled_kernel(interpreting())[grid](
        query, output, key_cache, value_cache, block_table, meta.query_start_loc, meta.seq_lens,
        scale,
        query.stride(0), query.stride(1), output.stride(0), output.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2), block_table.stride(0),
        SLIDING_WINDOW=meta.sliding_window, CHUNK_SIZE=meta.attention_chunk_size,
        PAGE_SIZE=kv_cache.shape[2],
        QUERIES_PER_KV=queries_per_kv, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_G=block_g,
        BLOCK_N=block_n, BLOCK_D=max(_next_pow2(head_dim), 16),
        IEEE=query.dtype == torch.float32,
    )
    return output
