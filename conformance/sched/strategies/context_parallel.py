"""Decode-context-parallel sizes for generated engine configs (`workloads.context_parallel`).

DCP is drawn only where the twin models it (every group full attention, hashes at the
scheduler block), so it scales the blocks of layouts the other draws already exercise.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from workloads.model import KVCacheGroup


def context_parallel_sizes(draw: Any, groups: tuple[KVCacheGroup, ...],
                           hash_block_size: int | None, always: bool = False) -> int:
    """decode_context_parallel_size for one config; `always`: DCP on (the layout must allow
    it)."""
    dcp = 1
    if hash_block_size is None and all(g.type == "full" for g in groups):
        dcp = draw(st.sampled_from((2, 4) if always else (1, 1, 2, 4)),
                   label="decode_context_parallel_size")
    return dcp
