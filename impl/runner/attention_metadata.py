"""What an attention layer needs to know about one step's batch, for one KV-cache group.

The batch is flat: the query tokens of all requests are concatenated, request `i` owning
`query_start_loc[i]:query_start_loc[i + 1]`. A request's query tokens are the *last* tokens of
its sequence (its first `seq_lens[i] - query_len` tokens are already in the cache), so prefill
chunks and decodes are the same case with different query lengths. Groups differ only in block
size, block table, slot mapping and window; the rest is shared.
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

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_host, default=0)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_host, default=0)


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
