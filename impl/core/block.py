"""`KVCacheBlock` and the LRU free-block queue.

Why a doubly-linked list threaded through the blocks (and not an `OrderedDict` keyed by block
id, which the twin used before): the list costs two pointers per block and nothing else, where
an ordered dict entry costs about 100 bytes, so a 1M-block pool shrinks by ~100 MiB; compiled
(mypyc), each link write is one native store, so popping, freeing and touching run several
times faster than upstream's interpreted pointer updates. It also answers "the free blocks after
this one" in O(1), which the CPU offload tier's lazy store cursor needs on every step.

    head sentinel <-> b3 <-> b4 <-> b2 <-> b1 <-> tail sentinel
    (evicted first)                         (freed last, kept longest)

A queued block has both links set; a block outside the queue has both None. The sentinels
(block id -1) are never handed out, so the hot paths never test for an empty neighbour.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mypy_extensions import i32, mypyc_attr

from vtwin.errors import IntegrityError

BlockHash = bytes
SENTINEL_ID = -1


@dataclass(slots=True, eq=False, init=False)
class KVCacheBlock:
    """Metadata of one physical KV-cache block (a page shared by one layer of every group).

    `block_hash` is set once the block is full and cached for `hash_group_id`; a block with a
    hash and `ref_cnt == 0` is *cached and free*: it sits in the free queue and in the hash map
    at the same time, so a prefix hit can revive it until it is evicted for reuse.
    """

    # Field order is memory layout when compiled: the fields every queue operation touches
    # (the reference count and both links) sit next to the object header, so one cache line
    # usually holds them, and the group id is 32-bit so that the block fits mypyc's struct in
    # 80 bytes (96 with the GC header: pymalloc's 96-byte class, not 112). A pool's blocks lie
    # one after another, so bytes per block are what a pass over a batch of them costs once
    # the pool outgrows the caches (see reports/benchmarks.md, "The misses").
    ref_cnt: int
    # The free queue's links (both None while the block is not free).
    prev_free: KVCacheBlock | None
    next_free: KVCacheBlock | None
    block_hash: BlockHash | None
    block_id: int
    # Secondary prefix-cache keys of this block: hashes of sub-block boundaries inside it
    # (a prompt that ends inside the block can still be found at that boundary).
    extra_hashes: list[BlockHash] | None
    hash_group_id: i32  # -1 while the block has no hash
    is_null: bool

    def __init__(self, block_id: int) -> None:
        """A new block: free of references, hash and links (the pool and the free queue set
        them). Written out (`init=False`) so that it compiles: a dataclass's generated
        `__init__` stays interpreted under mypyc (see `impl.sched.output`)."""
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash = None
        self.hash_group_id = -1
        self.is_null = False
        self.extra_hashes = None
        self.prev_free = None
        self.next_free = None

    def reset_hash(self) -> None:
        self.block_hash = None
        self.hash_group_id = -1
        self.extra_hashes = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash is not None else None
        return f"KVCacheBlock(id={self.block_id}, ref={self.ref_cnt}, hash={h})"


def _chain(start: KVCacheBlock, blocks: list[KVCacheBlock]) -> KVCacheBlock:
    """Link `blocks` one after another behind `start`; returns the last (`start` if none). The
    caller links the last one onward."""
    last = start
    for block in blocks:
        last.next_free = block
        block.prev_free = last
        last = block
    return last


@mypyc_attr(native_class=False)  # mypyc compiles no native subclass of a builtin exception
class NotQueuedError(IntegrityError):
    """A link the free queue needed is missing: the block (or a sentinel's neighbour) is not in
    the queue. Unreachable while the links are consistent, which `check_integrity` checks."""

    def __init__(self, block: KVCacheBlock) -> None:
        super().__init__(f"free queue: {block} is not queued")


class FreeKVCacheBlockQueue:
    """Free blocks in eviction order: the head is evicted (reused) first.

    Blocks freed with a hash go to the tail (kept as long as possible for prefix hits); blocks
    freed without one go to the front (nothing is lost by reusing them first).
    """

    __slots__ = ("_head", "_tail", "num_free_blocks")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self._head = KVCacheBlock(SENTINEL_ID)
        self._tail = KVCacheBlock(SENTINEL_ID)
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        self.append_n(blocks)  # links head -> blocks -> tail (head -> tail when there are none)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVCacheBlock:
        if self.num_free_blocks == 0:
            raise ValueError("No free block is available")
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """The first `n` blocks, unlinked in one splice (head -> the block after them)."""
        if n > self.num_free_blocks:
            raise ValueError(f"Cannot pop {n} blocks: only {self.num_free_blocks} are free")
        taken: list[KVCacheBlock] = []
        block = self._head.next_free
        for _ in range(n):
            if block is None:
                raise NotQueuedError(self._head)
            taken.append(block)
            following = block.next_free
            block.prev_free = block.next_free = None
            block = following
        if block is None:
            raise NotQueuedError(self._head)
        self._head.next_free = block
        block.prev_free = self._head
        self.num_free_blocks -= n
        return taken

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink a block from anywhere in the queue (a prefix hit on a cached free block)."""
        before, after = block.prev_free, block.next_free
        if before is None or after is None:
            raise NotQueuedError(block)
        before.next_free = after
        after.prev_free = before
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        tail = self._tail
        last = tail.prev_free
        if last is None:
            raise NotQueuedError(tail)
        last.next_free = block
        block.prev_free = last
        block.next_free = tail
        tail.prev_free = block
        self.num_free_blocks += 1

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Link `blocks` at the tail in order (the last of them is kept longest)."""
        tail = self._tail
        last = tail.prev_free
        if last is None:
            raise NotQueuedError(tail)
        end = _chain(last, blocks)
        end.next_free = tail
        tail.prev_free = end
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Insert `blocks` at the front, keeping their order (blocks[0] becomes the head)."""
        head = self._head
        first = head.next_free
        if first is None:
            raise NotQueuedError(head)
        end = _chain(head, blocks)
        end.next_free = first
        first.prev_free = end
        self.num_free_blocks += len(blocks)

    def after(self, block: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
        """Free blocks in eviction order after `block` (all of them for None; none when
        `block` is not queued)."""
        if block is None:
            block = self._head
        elif block.next_free is None:
            return
        tail = self._tail
        current = block.next_free
        while current is not None and current is not tail:
            following = current.next_free  # read first: the consumer may unlink `current`
            yield current
            current = following

    def __iter__(self) -> Iterator[KVCacheBlock]:
        return self.after(None)

    def block_ids(self) -> list[int]:
        return [block.block_id for block in self.after(None)]

    def check_integrity(self) -> None:
        """The links agree both ways, the count matches, and every entry is free (ref 0), not
        the null block and queued once.

        Raises `IntegrityError` (not `assert`): the check must survive `python -O`.
        """
        seen: set[int] = set()
        before = self._head
        current = before.next_free
        while current is not self._tail:
            if current is None or current.prev_free is not before:
                raise IntegrityError(f"free queue: broken link after {before}")
            if current.block_id in seen:
                raise IntegrityError(f"free queue: {current} is queued twice")
            seen.add(current.block_id)
            if current.ref_cnt != 0:
                raise IntegrityError(f"free queue: {current} is queued with ref_cnt > 0")
            if current.is_null:
                raise IntegrityError("free queue: the null block is queued")
            before, current = current, current.next_free
        if self._tail.prev_free is not before:
            raise IntegrityError("free queue: the tail does not link back to the last block")
        if len(seen) != self.num_free_blocks:
            raise IntegrityError(f"free queue: {len(seen)} blocks linked, "
                                 f"{self.num_free_blocks} counted")
