"""`KVCacheBlocks`: what `KVCacheManager` hands the scheduler, a list of blocks per group."""

from __future__ import annotations

from impl.core.coordinator import PerGroupBlocks


class KVCacheBlocks:
    """One allocation result: a list of blocks per KV-cache group (treat as read-only)."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: PerGroupBlocks) -> None:
        self.blocks = blocks

    def get_block_ids(self) -> tuple[list[int], ...]:
        return tuple([block.block_id for block in group] for group in self.blocks)

    def get_block_ids_or_none(self) -> tuple[list[int], ...] | None:
        """Block ids per group, or None when no group got any block."""
        for group in self.blocks:
            if group:
                return self.get_block_ids()
        return None

    def __repr__(self) -> str:
        return f"KVCacheBlocks({self.get_block_ids()})"
