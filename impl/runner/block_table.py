"""Block tables: the physical block ids of each batch row, one table per KV-cache group.

Rows follow the persistent input batch (row i of every table belongs to the request in batch
row i), so the batch moves and swaps table rows together with its own. The table is a dense
host array that is copied to the device once per step; `slot_mapping` turns (row, position)
pairs into the flat cache slots the attention layers write to.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

IntArray = npt.NDArray[np.int64]


class BlockTable:
    def __init__(self, max_num_reqs: int, max_num_blocks_per_req: int, block_size: int) -> None:
        self.block_size = block_size
        self.max_num_blocks_per_req = max_num_blocks_per_req
        self.table = np.zeros((max_num_reqs, max_num_blocks_per_req), dtype=np.int32)
        self.num_blocks = np.zeros(max_num_reqs, dtype=np.int32)

    def append_row(self, block_ids: Sequence[int], row: int) -> None:
        if not block_ids:
            return
        start = int(self.num_blocks[row])
        end = start + len(block_ids)
        if end > self.max_num_blocks_per_req:
            raise ValueError(f"block table row {row}: {end} blocks exceed the maximum "
                             f"{self.max_num_blocks_per_req} per request")
        self.table[row, start:end] = block_ids
        self.num_blocks[row] = end

    def add_row(self, block_ids: Sequence[int], row: int) -> None:
        """Replace the row (a new or resumed request)."""
        self.num_blocks[row] = 0
        self.append_row(block_ids, row)

    def move_row(self, src: int, dst: int) -> None:
        count = int(self.num_blocks[src])
        self.table[dst, :count] = self.table[src, :count]
        self.num_blocks[dst] = count
        self.num_blocks[src] = 0

    def swap_rows(self, a: int, b: int) -> None:
        self.table[[a, b]] = self.table[[b, a]]
        self.num_blocks[[a, b]] = self.num_blocks[[b, a]]

    def clear_row(self, row: int) -> None:
        self.num_blocks[row] = 0

    def row(self, row: int) -> list[int]:
        return [int(b) for b in self.table[row, :int(self.num_blocks[row])]]

    def slot_mapping(self, rows: IntArray, positions: IntArray) -> IntArray:
        """Cache slot of each token: block_id * block_size + position % block_size."""
        # rows, positions: [num_tokens]
        block_index = positions // self.block_size
        if rows.size and bool(np.any(block_index >= self.num_blocks[rows])):
            bad = int(np.argmax(block_index >= self.num_blocks[rows]))
            raise ValueError(f"position {int(positions[bad])} of batch row {int(rows[bad])} has "
                             f"no block (row holds {int(self.num_blocks[rows[bad]])} blocks)")
        block_ids = self.table[rows, block_index].astype(np.int64)
        return block_ids * self.block_size + positions % self.block_size

    def device_table(self, num_rows: int, device: torch.device) -> torch.Tensor:
        # -> [num_rows, max_num_blocks_per_req] int32
        return torch.from_numpy(self.table[:num_rows].copy()).to(device)


class MultiGroupBlockTable:
    """One `BlockTable` per KV-cache group, moved in lockstep."""

    def __init__(self, max_num_reqs: int, max_model_len: int, block_sizes: Sequence[int]) -> None:
        self.tables = [BlockTable(max_num_reqs, -(-max_model_len // size), size)
                       for size in block_sizes]

    def __getitem__(self, group: int) -> BlockTable:
        return self.tables[group]

    def __len__(self) -> int:
        return len(self.tables)

    def add_row(self, block_ids: Sequence[Sequence[int]], row: int) -> None:
        self._check_groups(block_ids)
        for table, ids in zip(self.tables, block_ids, strict=True):
            table.add_row(ids, row)

    def append_row(self, block_ids: Sequence[Sequence[int]], row: int) -> None:
        self._check_groups(block_ids)
        for table, ids in zip(self.tables, block_ids, strict=True):
            table.append_row(ids, row)

    def move_row(self, src: int, dst: int) -> None:
        for table in self.tables:
            table.move_row(src, dst)

    def swap_rows(self, a: int, b: int) -> None:
        for table in self.tables:
            table.swap_rows(a, b)

    def clear_row(self, row: int) -> None:
        for table in self.tables:
            table.clear_row(row)

    def _check_groups(self, block_ids: Sequence[Sequence[int]]) -> None:
        if len(block_ids) != len(self.tables):
            raise ValueError(f"block ids for {len(block_ids)} groups, the cache has "
                             f"{len(self.tables)}")
