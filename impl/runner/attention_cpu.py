"""Batched paged attention for CPU: whole runs of requests per call, no per-request loop.

The torch reference (`attention_torch`) is written to be obviously right, and on CPU that costs:
it gathers pages with advanced indexing (`cache[pages]`, ~5x slower than `index_select` over
whole blocks, measured) and lets `einsum` permute K and V into a matmul layout (a strided copy
per call that took longer than the math). Here the requests of a step are cut into runs
(decodes together; longer queries together, padded to the run's longest query while the padded
score tensor stays under a budget), and for each run:

1. each KV head's pages are copied with one `index_select` of whole [block_size, d] tiles (the
   cache's memory is head-major, `attention_metadata.head_major`) straight into
   [kv_heads, requests, seq, head_dim], the layout `bmm` takes as is;
2. decodes: scores = one `bmm`, masked by positions (causal, plus window or chunk), softmax,
   then the values weighted where they lie (`embedding_bag`), so only K is copied;
3. longer queries: padded, then torch's fused `scaled_dot_product_attention`.

Measured on 2 cores (32 decodes, 192-token sequences, 2 KV heads of 64): ~0.4 ms per layer
against 2.5 ms for the reference. Padded query rows repeat their request's last query position,
so every row sees at least one key (no NaN), and are dropped when the output is written back.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from impl.runner.attention_metadata import AttentionMetadata
from impl.runner.attention_torch import narrow_to_local

SCORE_BUDGET = 1 << 24
"""Padded score elements (per head) one run may hold; a request over it runs alone."""


def request_runs(query_lens: tuple[int, ...], seq_lens: tuple[int, ...],
                 block_size: int) -> Iterator[tuple[int, int]]:
    """Consecutive request ranges [first, last) attended together: decodes are never padded
    to a longer query, and a run grows while its padded score size fits the budget."""
    first, longest_query, longest_seq = 0, 0, 0
    for index, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens, strict=True)):
        padded_seq = -(-max(longest_seq, seq_len) // block_size) * block_size
        grown = (index + 1 - first) * max(longest_query, query_len) * padded_seq
        if index > first and ((query_len == 1) != (longest_query == 1) or grown > SCORE_BUDGET):
            yield first, index
            first, longest_query, longest_seq = index, 0, 0
        longest_query, longest_seq = max(longest_query, query_len), max(longest_seq, seq_len)
    if first < len(query_lens):
        yield first, len(query_lens)


def head_tiles(kv_cache: torch.Tensor) -> torch.Tensor:
    """The cache as [num_blocks * 2 * kv_heads, block_size, d]: tile (block b, K/V t, head h)
    is row (b * 2 + t) * kv_heads + h, one head's vectors for one page's tokens."""
    # kv_cache: [num_blocks, 2, block_size, kv_heads, d] over head-major memory
    tiles = kv_cache.transpose(2, 3)  # [num_blocks, 2, kv_heads, block_size, d]
    if not tiles.is_contiguous():
        raise ValueError("cpu attention: the KV cache must be head-major memory "
                         "(allocate it through attention_metadata.head_major)")
    return tiles.reshape(-1, kv_cache.shape[2], kv_cache.shape[4])


def tile_ids(pages: torch.Tensor, kinds: tuple[int, ...], kv_heads: int) -> torch.Tensor:
    """[len(kinds), kv_heads, R, P] rows of `head_tiles` (kind 0: K, 1: V) for pages [R, P]."""
    kind = torch.tensor(kinds, device=pages.device)[:, None, None, None]
    head = torch.arange(kv_heads, device=pages.device)[None, :, None, None]
    return (pages.long()[None, None] * 2 + kind) * kv_heads + head


def gather_pages(kv_cache: torch.Tensor, pages: torch.Tensor,
                 kinds: tuple[int, ...] = (0, 1)) -> torch.Tensor:
    """K and/or V (`kinds`) of `pages` (R requests x P pages each), per KV head and request, in
    token order: [len(kinds), kv_heads, R, P * block_size, d]. One `index_select` of whole
    [block_size, d] tiles (`head_tiles`), ordered (K/V, head, request, page) so the result is
    already the batched-matmul layout."""
    # kv_cache: [num_blocks, 2, block_size, kv_heads, d] over head-major memory; pages: [R, P]
    block_size, kv_heads, head_dim = kv_cache.shape[2:]
    ids = tile_ids(pages, kinds, kv_heads).reshape(-1)
    out = head_tiles(kv_cache).index_select(0, ids)
    return out.view(len(kinds), kv_heads, pages.shape[0], pages.shape[1] * block_size, head_dim)


def _visible(query_lens: torch.Tensor, seq_lens: torch.Tensor, offsets: torch.Tensor,
             seq: int, meta: AttentionMetadata, device: torch.device) -> torch.Tensor:
    """[R, L, seq] bool: which keys query row (r, i) sees (row i is query token `offsets`)."""
    q_pos = ((seq_lens - query_lens)[:, None] + offsets).to(device)[..., None]  # [R, L, 1]
    k_pos = torch.arange(seq, device=device)[None, None, :]  # [1, 1, seq]
    return narrow_to_local(k_pos <= q_pos, q_pos, k_pos, meta.sliding_window,
                           meta.attention_chunk_size)


def _decode_run(query: torch.Tensor, kv_cache: torch.Tensor, pages: torch.Tensor,
                visible: torch.Tensor, scale: float) -> torch.Tensor:
    """One query token per request: per (KV head, request), [group, d] x [d, seq] on the copied
    keys, softmax, then the values weighted in place. The value side is `embedding_bag`'s
    weighted sum of rows, a gather fused with the sum: V is read once from the cache instead
    of copied and read again (measured with cold caches, 32 requests x 192 tokens: 1.03 ms
    against 1.40 ms copying both). An fp16/bf16 cache copies V too (the weighted sum would
    round the probabilities to the cache's precision)."""
    # query: [R, heads, d]; pages: [R, P]; visible: [R, seq] -> [R, heads, d] (fp32)
    block_size, kv_heads, head_dim = kv_cache.shape[2:]
    num_reqs, num_pages = pages.shape
    seq, group = num_pages * block_size, query.shape[1] // kv_heads
    in_place = kv_cache.dtype == torch.float32
    kv = gather_pages(kv_cache, pages, (0,) if in_place else (0, 1)).float()
    q = query.float().view(num_reqs, kv_heads, group, head_dim).transpose(0, 1)
    scores = torch.bmm(q.reshape(kv_heads * num_reqs, group, head_dim),
                       kv[0].reshape(kv_heads * num_reqs, seq, head_dim).transpose(1, 2))
    scores = scores.view(kv_heads, num_reqs, group, seq).mul_(scale).masked_fill_(
        ~visible[None, :, None, :], float("-inf"))
    probs = scores.softmax(dim=-1)  # [kv_heads, R, group, seq]
    if in_place:
        rows = (tile_ids(pages, (1,), kv_heads)[0, ..., None] * block_size
                + torch.arange(block_size, device=pages.device))  # [kv_heads, R, P, block]
        rows = rows.view(kv_heads, num_reqs, 1, seq).expand(-1, -1, group, -1)
        out = torch.nn.functional.embedding_bag(
            rows.reshape(-1, seq), head_tiles(kv_cache).view(-1, head_dim), mode="sum",
            per_sample_weights=probs.reshape(-1, seq))  # [kv_heads * R * group, d]
    else:
        out = torch.bmm(probs.view(kv_heads * num_reqs, group, seq),
                        kv[1].reshape(kv_heads * num_reqs, seq, head_dim))
    out = out.view(kv_heads, num_reqs, group, head_dim)
    return out.transpose(0, 1).reshape(num_reqs, kv_heads * group, head_dim)


def _prefill_run(query: torch.Tensor, kv: torch.Tensor, query_lens: torch.Tensor,
                 offsets: torch.Tensor, visible: torch.Tensor, scale: float) -> torch.Tensor:
    """Longer queries, padded to the run's longest (L), through torch's fused CPU attention
    (`scaled_dot_product_attention`, which tiles instead of holding every score): 32 x
    128-token prefills took 5.6 ms against 12 ms for the reference."""
    # query: the run's tokens, [tokens, heads, d]; kv: [2, kv_heads, R, seq, d];
    # offsets: [R, L]; visible: [R, L, seq] -> [tokens, heads, d]
    longest = visible.shape[1]
    starts = torch.cumsum(query_lens, 0) - query_lens  # [R]
    padded = query[(starts[:, None] + offsets).to(query.device)].float()  # [R, L, heads, d]
    out = torch.nn.functional.scaled_dot_product_attention(
        padded.transpose(1, 2), kv[0].transpose(0, 1), kv[1].transpose(0, 1),
        attn_mask=visible[:, None], scale=scale, enable_gqa=True)  # [R, heads, L, d]
    real = torch.arange(longest)[None, :] < query_lens[:, None]  # [R, L]: not padding
    return out.transpose(1, 2)[real.to(query.device)]


def _attend_run(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                first: int, last: int, scale: float) -> torch.Tensor:
    """Attention output of requests [first, last): their query tokens, [tokens, heads, d]."""
    # query: the run's tokens, [tokens, heads, d]
    query_lens = torch.tensor(meta.query_lens_host[first:last])  # [R]
    seq_lens = torch.tensor(meta.seq_lens_host[first:last])  # [R]
    longest = max(meta.query_lens_host[first:last])
    block_size = kv_cache.shape[2]
    num_pages = -(-max(meta.seq_lens_host[first:last]) // block_size)
    pages = meta.block_table[first:last, :num_pages]  # [R, P]
    # Row i of request r is query token min(i, len_r - 1): padding repeats the last token.
    offsets = torch.minimum(torch.arange(longest)[None, :], (query_lens - 1)[:, None])  # [R, L]
    visible = _visible(query_lens, seq_lens, offsets, num_pages * block_size, meta,
                       query.device)
    if longest == 1:
        return _decode_run(query, kv_cache, pages, visible[:, 0], scale)
    kv = gather_pages(kv_cache, pages).float()
    return _prefill_run(query, kv, query_lens, offsets, visible, scale)


def cpu_paged_attention(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
                        scale: float) -> torch.Tensor:
    # query: [num_tokens, num_heads, head_dim] -> output of the same shape
    # kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim]
    output = torch.empty_like(query)
    start = 0
    for first, last in request_runs(meta.query_lens_host, meta.seq_lens_host,
                                    kv_cache.shape[2]):
        end = start + sum(meta.query_lens_host[first:last])
        output[start:end] = _attend_run(query[start:end], kv_cache, meta, first, last,
                                        scale).to(query.dtype)
        start = end
    return output
