"""One step's model inputs, computed from the input batch and the scheduled token counts.

Request i (batch row i) computes `num_scheduled[i]` tokens starting at its
`num_computed_tokens`: those are its query tokens, at positions computed .. computed + n - 1.
Everything else follows: query start locations (prefix sums), sequence lengths
(computed + n), each token's cache slot in every group, and which hidden states need logits
(the last one of a request that reaches the end of its input, plus one per draft token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from impl.runner.attention_metadata import AttentionMetadata
from impl.runner.input_batch import InputBatch


@dataclass(frozen=True, slots=True)
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    metadata: tuple[AttentionMetadata, ...]  # one per KV-cache group
    logits_indices: torch.Tensor  # [num_logits] int64: hidden-state rows that need logits
    req_ids: tuple[str, ...]  # batch order
    num_logits: tuple[int, ...]  # per request: 1 + its drafts if it samples, else 0


def build_step_inputs(batch: InputBatch, num_scheduled: Sequence[int],
                      num_drafts: Sequence[int], sliding_windows: Sequence[int],
                      device: torch.device, chunk_sizes: Sequence[int] | None = None,
                      ) -> StepInputs:
    """`num_scheduled` / `num_drafts` are per batch row; the batch must be condensed.
    `sliding_windows` / `chunk_sizes` are per KV-cache group (0: none; chunks default to 0)."""
    chunks = [0] * len(sliding_windows) if chunk_sizes is None else chunk_sizes
    num_reqs = batch.num_reqs
    counts = np.asarray(num_scheduled, dtype=np.int64)  # [num_reqs]
    rows = np.repeat(np.arange(num_reqs, dtype=np.int64), counts)  # [num_tokens]
    query_start_loc = np.zeros(num_reqs + 1, dtype=np.int64)
    np.cumsum(counts, out=query_start_loc[1:])
    offsets = np.arange(rows.size, dtype=np.int64) - np.repeat(query_start_loc[:-1], counts)
    computed = batch.num_computed_tokens[:num_reqs]
    positions = computed[rows] + offsets  # [num_tokens]
    input_ids = batch.token_ids[rows, positions]  # [num_tokens]
    seq_lens = computed + counts  # [num_reqs]

    drafts = np.asarray(num_drafts, dtype=np.int64)
    samples = seq_lens >= batch.num_tokens[:num_reqs] + drafts  # input complete: sample
    num_logits = np.where(samples, drafts + 1, 0)
    last = query_start_loc[1:] - 1  # [num_reqs]: each request's last query token
    logits_indices = np.concatenate(
        [np.arange(end - n + 1, end + 1) for end, n in zip(last, num_logits, strict=True)]
        or [np.zeros(0, dtype=np.int64)]).astype(np.int64)

    qsl_dev = torch.from_numpy(query_start_loc.astype(np.int32)).to(device)
    seq_dev = torch.from_numpy(seq_lens.astype(np.int32)).to(device)
    query_lens_host = tuple(counts.tolist())
    seq_lens_host = tuple(seq_lens.tolist())
    metadata = tuple(
        AttentionMetadata(
            query_start_loc=qsl_dev, seq_lens=seq_dev,
            block_table=table.device_table(num_reqs, device),
            slot_mapping=torch.from_numpy(table.slot_mapping(rows, positions)).to(device),
            query_lens_host=query_lens_host, seq_lens_host=seq_lens_host,
            block_size=table.block_size, sliding_window=window, attention_chunk_size=chunk,
        )
        for table, window, chunk in zip(batch.block_table.tables, sliding_windows, chunks,
                                        strict=True)
    )
    return StepInputs(
        input_ids=torch.from_numpy(input_ids).to(device),
        positions=torch.from_numpy(positions).to(device),
        metadata=metadata,
        logits_indices=torch.from_numpy(logits_indices).to(device),
        req_ids=tuple(batch.req_ids),
        num_logits=tuple(num_logits.tolist()),
    )
