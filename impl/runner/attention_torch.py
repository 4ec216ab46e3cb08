"""Reference paged attention in plain torch: gather each request's keys through its block
table, then dense causal attention. Slow (a loop over requests) but obviously right, which is
what the Triton kernel is checked against. Runs on any device."""

from __future__ import annotations

import torch

from impl.runner.attention_metadata import AttentionMetadata


def gather_sequence(cache: torch.Tensor, block_ids: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One request's first `seq_len` cached vectors, in token order."""
    # cache: [num_blocks, block_size, num_kv_heads, head_dim]; block_ids: [>= cdiv(seq_len, bs)]
    block_size = cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    pages = cache[block_ids[:num_blocks].long()]  # [num_blocks, block_size, kv_heads, head_dim]
    return pages.reshape(-1, *cache.shape[2:])[:seq_len]


def visible_mask(query_len: int, seq_len: int, sliding_window: int,
                 device: torch.device) -> torch.Tensor:
    """[query_len, seq_len] bool: causal (and windowed) visibility of keys to queries."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=device)[:, None]
    k_pos = torch.arange(seq_len, device=device)[None, :]
    mask = k_pos <= q_pos
    if sliding_window > 0:
        mask &= q_pos - k_pos < sliding_window
    return mask


def torch_paged_attention(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                          scale: float) -> torch.Tensor:
    # query: [num_tokens, num_heads, head_dim] -> output of the same shape
    # kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim]
    num_heads = query.shape[1]
    group = num_heads // kv_cache.shape[3]
    output = torch.empty_like(query)
    start = 0
    for index, (query_len, seq_len) in enumerate(
            zip(meta.query_lens_host, meta.seq_lens_host, strict=True)):
        q = query[start:start + query_len].float()  # [query_len, num_heads, head_dim]
        block_ids = meta.block_table[index]
        k = gather_sequence(kv_cache[:, 0], block_ids, seq_len).float()
        v = gather_sequence(kv_cache[:, 1], block_ids, seq_len).float()
        k = k.repeat_interleave(group, dim=1)  # [seq_len, num_heads, head_dim]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale  # [num_heads, query_len, seq_len]
        mask = visible_mask(query_len, seq_len, meta.sliding_window, query.device)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("hqk,khd->qhd", probs, v)
        output[start:start + query_len] = out.to(query.dtype)
        start += query_len
    return output
