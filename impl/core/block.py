"""`KVCacheBlock` and the LRU free-block queue.

Why an `OrderedDict` and not a hand-written doubly-linked list: CPython's OrderedDict *is* a
doubly-linked list with a hash index, implemented in C. It gives O(1) pop from either end,
O(1) removal from the middle (`del queue[block_id]`, needed when a prefix hit "touches" a cached
block that sits in the free queue), O(1) append and O(1) front insertion (`move_to_end(k,
last=False)`), without one Python-level pointer write per operation. The eviction order it
produces is the same as a pointer-based list's: head = least recently freed = evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from vtwin.errors import IntegrityError

BlockHash = bytes


@dataclass(slots=True, eq=False)
class KVCacheBlock:
    """Metadata of one physical KV-cache block (a page shared by one layer of every group).

    `block_hash` is set once the block is full and cached for `hash_group_id`; a block with a
    hash and `ref_cnt == 0` is *cached and free*: it sits in the free queue and in the hash map
    at the same time, so a prefix hit can revive it until it is evicted for reuse.
    """

    block_id: int
    ref_cnt: int = 0
    block_hash: BlockHash | None = None
    hash_group_id: int = -1
    is_null: bool = False
    # Secondary prefix-cache keys of this block: hashes of sub-block boundaries inside it
    # (a prompt that ends inside the block can still be found at that boundary).
    extra_hashes: list[BlockHash] | None = None

    def reset_hash(self) -> None:
        self.block_hash = None
        self.hash_group_id = -1
        self.extra_hashes = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash is not None else None
        return f"KVCacheBlock(id={self.block_id}, ref={self.ref_cnt}, hash={h})"


class FreeKVCacheBlockQueue:
    """Free blocks in eviction order: the head is evicted (reused) first.

    Blocks freed with a hash go to the tail (kept as long as possible for prefix hits); blocks
    freed without one go to the front (nothing is lost by reusing them first).
    """

    __slots__ = ("_queue",)

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        self._queue: OrderedDict[int, KVCacheBlock] = OrderedDict(
            (block.block_id, block) for block in blocks
        )

    @property
    def queue(self) -> OrderedDict[int, KVCacheBlock]:
        """The underlying ordered map (block id -> block), for the pool's hot loops."""
        return self._queue

    @property
    def num_free_blocks(self) -> int:
        return len(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    def popleft(self) -> KVCacheBlock:
        if not self._queue:
            raise ValueError("No free block is available")
        return self._queue.popitem(False)[1]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        if n > len(self._queue):
            raise ValueError(f"Cannot pop {n} blocks: only {len(self._queue)} are free")
        pop = self._queue.popitem
        return [pop(False)[1] for _ in range(n)]

    def remove(self, block: KVCacheBlock) -> None:
        del self._queue[block.block_id]

    def append(self, block: KVCacheBlock) -> None:
        self._queue[block.block_id] = block

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Insert `blocks` at the front, keeping their order (blocks[0] becomes the head)."""
        queue = self._queue
        to_front = queue.move_to_end
        for block in reversed(blocks):
            queue[block.block_id] = block
            to_front(block.block_id, False)

    def block_ids(self) -> list[int]:
        return list(self._queue)

    def __iter__(self) -> Iterator[KVCacheBlock]:
        return iter(self._queue.values())

    def check_integrity(self) -> None:
        """Every entry is keyed by its own id, is free (ref 0) and is not the null block.

        Raises `IntegrityError` (not `assert`): the check must survive `python -O`.
        """
        for block_id, block in self._queue.items():
            if block.block_id != block_id:
                raise IntegrityError(f"free queue: key {block_id} holds {block}")
            if block.ref_cnt != 0:
                raise IntegrityError(f"free queue: {block} is queued with ref_cnt > 0")
            if block.is_null:
                raise IntegrityError("free queue: the null block is queued")
