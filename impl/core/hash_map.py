"""`BlockHashToBlockMap`: the prefix cache's index from a block hash to cached blocks.

Why several blocks per hash: two requests can compute the same full block concurrently (neither
saw the other's block in the cache when it was scheduled). Both blocks stay in their block
tables (block tables are append-only, so we cannot swap one for the other), so both are indexed;
a lookup returns the earliest one still cached. One map per KV-cache group: the same tokens in
different groups are different pages, cached and evicted independently.
"""

from __future__ import annotations

from collections.abc import Iterator

from impl.core.block import BlockHash, KVCacheBlock


class BlockHashToBlockMap:
    __slots__ = ("_single", "_multi")

    def __init__(self) -> None:
        # The common case (one block per hash) stays a plain dict lookup; duplicates live in
        # `_multi` as an insertion-ordered dict of block id -> block.
        self._single: dict[BlockHash, KVCacheBlock] = {}
        self._multi: dict[BlockHash, dict[int, KVCacheBlock]] = {}

    def get_one_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        block = self._single.get(block_hash)
        if block is not None or not self._multi:
            return block
        several = self._multi.get(block_hash)
        if several:
            return next(iter(several.values()))
        return None

    def insert(self, block_hash: BlockHash, block: KVCacheBlock) -> None:
        """One lookup in the big dict: with 10^5 entries each lookup is a cache miss, and these
        were a fifth of a whole-trace replay (perf, compiled twin)."""
        if self._multi:
            several = self._multi.get(block_hash)
            if several is not None:
                several[block.block_id] = block
                return
        first = self._single.setdefault(block_hash, block)
        if first is not block:  # a second block under this hash: both go to `_multi`
            del self._single[block_hash]
            self._multi[block_hash] = {first.block_id: first, block.block_id: block}

    def pop(self, block_hash: BlockHash, block_id: int) -> KVCacheBlock | None:
        """Remove the entry for `block_id` under `block_hash`; None if it is not indexed.
        `get` then `del`: the second lookup finds the entry's cache line already loaded, and
        both are native calls when compiled, where `dict.pop(key, default)` is a method call
        by name (perf: 7% of a whole-trace replay under `PyObject_VectorcallMethod`)."""
        block = self._single.get(block_hash)
        if block is not None:
            if block.block_id != block_id:
                return None  # another block's entry
            del self._single[block_hash]
            return block
        if not self._multi:
            return None
        several = self._multi.get(block_hash)
        if several is None:
            return None
        block = several.pop(block_id, None)
        if block is not None and len(several) == 1:
            (remaining,) = several.values()
            del self._multi[block_hash]
            self._single[block_hash] = remaining
        return block

    def __len__(self) -> int:
        return len(self._single) + len(self._multi)

    def hashes(self) -> Iterator[BlockHash]:
        yield from self._single
        yield from self._multi

    def items(self) -> Iterator[tuple[BlockHash, KVCacheBlock]]:
        """Every (hash, block) entry, duplicates included."""
        yield from self._single.items()
        for block_hash, several in self._multi.items():
            for block in several.values():
                yield block_hash, block

    def contains(self, block_hash: BlockHash, block_id: int) -> bool:
        """Whether block `block_id` is indexed under `block_hash`."""
        block = self._single.get(block_hash)
        if block is not None:
            return block.block_id == block_id
        several = self._multi.get(block_hash)
        return several is not None and block_id in several
