"""Reference paged attention in plain torch: gather each request's keys through its block
table, then dense causal attention. Obviously right rather than fast, which is what the Triton
kernel is checked against; runs on any device.

One concession to speed: the leading run of single-token queries (the runner puts decodes first)
is computed as one padded batch, since a per-request loop costs more than the math there.
"""

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


def visible_mask(query_len: int, seq_len: int, sliding_window: int, chunk_size: int,
                 device: torch.device) -> torch.Tensor:
    """[query_len, seq_len] bool: causal (and windowed, or chunked) visibility of keys."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=device)[:, None]
    k_pos = torch.arange(seq_len, device=device)[None, :]
    return narrow_to_local(k_pos <= q_pos, q_pos, k_pos, sliding_window, chunk_size)


def narrow_to_local(mask: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                    sliding_window: int, chunk_size: int) -> torch.Tensor:
    """Narrow a causal mask to the window, or to the query's own chunk."""
    if sliding_window > 0:
        mask &= q_pos - k_pos < sliding_window
    if chunk_size > 0:
        mask &= torch.div(k_pos, chunk_size, rounding_mode="floor") == torch.div(
            q_pos, chunk_size, rounding_mode="floor")
    return mask


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
            scale: float) -> torch.Tensor:
    """Softmax attention with GQA by reshaping (query head h uses KV head h // group)."""
    # q: [..., q_len, heads, d]; k, v: [..., s, kv_heads, d]; mask: [..., q_len, s]
    kv_heads, d = k.shape[-2], k.shape[-1]
    group = q.shape[-2] // kv_heads
    q = q.float().reshape(*q.shape[:-2], kv_heads, group, d)  # [..., q_len, kv_heads, g, d]
    scores = torch.einsum("...qkgd,...skd->...kgqs", q, k.float()) * scale
    scores = scores.masked_fill(~mask[..., None, None, :, :], float("-inf"))
    out = torch.einsum("...kgqs,...skd->...qkgd", scores.softmax(dim=-1), v.float())
    return out.reshape(*out.shape[:-3], kv_heads * group, d)  # [..., q_len, heads, d]


def _decode_batch(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                  count: int, scale: float) -> torch.Tensor:
    """The first `count` requests, each with one query token, padded to the longest."""
    # query: [count, heads, d] -> [count, heads, d]
    block_size = kv_cache.shape[2]
    max_blocks = -(-max(meta.seq_lens_host[:count]) // block_size)
    pages = meta.block_table[:count, :max_blocks].long()  # [count, max_blocks]
    k = kv_cache[:, 0][pages].flatten(1, 2)  # [count, max_blocks * block_size, kv_heads, d]
    v = kv_cache[:, 1][pages].flatten(1, 2)
    k_pos = torch.arange(k.shape[1], device=query.device)[None, :]
    q_pos = (meta.seq_lens[:count].long() - 1)[:, None]  # [count, 1]
    mask = narrow_to_local(k_pos <= q_pos, q_pos, k_pos, meta.sliding_window,
                           meta.attention_chunk_size)
    return _attend(query[:count, None], k, v, mask[:, None, :], scale)[:, 0]


def torch_paged_attention(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                          scale: float) -> torch.Tensor:
    # query: [num_tokens, num_heads, head_dim] -> output of the same shape
    # kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim]
    output = torch.empty_like(query)
    decodes = 0
    while decodes < meta.num_reqs and meta.query_lens_host[decodes] == 1:
        decodes += 1
    if decodes:
        output[:decodes] = _decode_batch(query, kv_cache, meta, decodes, scale).to(query.dtype)
    start = decodes
    for index in range(decodes, meta.num_reqs):
        query_len, seq_len = meta.query_lens_host[index], meta.seq_lens_host[index]
        block_ids = meta.block_table[index]
        k = gather_sequence(kv_cache[:, 0], block_ids, seq_len)  # [seq_len, kv_heads, d]
        v = gather_sequence(kv_cache[:, 1], block_ids, seq_len)
        mask = visible_mask(query_len, seq_len, meta.sliding_window, meta.attention_chunk_size,
                            query.device)
        out = _attend(query[start:start + query_len], k, v, mask, scale)
        output[start:start + query_len] = out.to(query.dtype)
        start += query_len
    return output
