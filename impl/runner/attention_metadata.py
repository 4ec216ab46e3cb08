"""What an attention layer needs to know about one step's batch, for one KV-cache group.

The batch is flat: the query tokens of all requests are concatenated, request `i` owning
`query_start_loc[i]:query_start_loc[i + 1]`. A request's query tokens are the *last* tokens of
its sequence (its first `seq_lens[i] - query_len` tokens are already in the cache), so prefill
chunks and decodes are the same case with different query lengths. Groups differ only in block
size, block table, slot mapping and window or chunk; the rest is shared.

Chunked local attention (Llama 4's local layers): positions are cut into chunks of
`attention_chunk_size` tokens and a query sees only the keys of its own chunk, up to itself:

    chunk 4, query at 9:   keys 0 1 2 3 | 4 5 6 7 | 8 [9] 10 11     visible: 8, 9
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    query_start_loc: torch.Tensor  # [num_reqs + 1] int32, on the model's device
    seq_lens: torch.Tensor  # [num_reqs] int32: tokens in the cache after this step
    block_table: torch.Tensor  # [num_reqs, max_blocks_per_req] int32: physical block ids
    slot_mapping: torch.Tensor  # [num_tokens] int64: block_id * block_size + offset
    query_lens_host: tuple[int, ...]  # host copies, so no backend has to sync the device
    seq_lens_host: tuple[int, ...]
    block_size: int
    sliding_window: int = 0  # 0: full attention; else a key is visible if q_pos - k_pos < window
    attention_chunk_size: int = 0  # 0: none; else a key is visible if in the query's chunk

    def chunk_start(self, position: int) -> int:
        """The first position a query at `position` sees under chunked local attention."""
        chunk = self.attention_chunk_size
        return position // chunk * chunk if chunk > 0 else 0

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_host, default=0)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_host, default=0)


def head_major(pages: torch.Tensor, block_size: int) -> torch.Tensor:
    """The paged-cache view every backend indexes, [num_blocks, 2, block_size, kv_heads, d],
    of memory laid out head-major: `pages` is [num_blocks, 2, kv_heads, block_size, d]
    (contiguous). Within a page, one head's keys for consecutive tokens are one contiguous
    [block_size, d] tile, which is what the CPU kernel copies whole (`attention_cpu`);
    backends that index the logical view do not see the difference."""
    # pages: [num_blocks, 2, kv_heads, block_size, d] -> [num_blocks, 2, block_size, kv_heads, d]
    if pages.shape[3] != block_size:
        raise ValueError(f"paged cache: dim 3 is {pages.shape[3]}, not the block size "
                         f"{block_size}")
    return pages.transpose(2, 3)


def write_to_paged_cache(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                         slot_mapping: torch.Tensor) -> None:
    """Store this step's keys and values at their slots (all backends share the layout)."""
    # key, value: [num_tokens, num_kv_heads, head_dim]
    # kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim]
    block_size = kv_cache.shape[2]
    blocks = torch.div(slot_mapping, block_size, rounding_mode="floor")
    offsets = slot_mapping % block_size
    kv_cache[:, 0][blocks, offsets] = key
    kv_cache[:, 1][blocks, offsets] = value
