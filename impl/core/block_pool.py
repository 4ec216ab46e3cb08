"""`BlockPool`: every physical block, the free queue and the prefix-cache index.

A block is always in exactly one of four states (checked by `check_integrity`):
null (block 0, a placeholder for skipped positions, never freed or cached), in use
(ref_cnt > 0), cached-and-free (ref_cnt == 0 with a hash: in the free queue *and* the index),
empty-and-free (ref_cnt == 0, no hash). `get_num_free_blocks` counts both free kinds: cached
content is evictable, so for allocation it is free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from impl.core.block import BlockHash, FreeKVCacheBlockQueue, KVCacheBlock
from impl.core.block_states import (
    ACTIVE,
    CACHED,
    EMPTY,
    BlockStateTracker,
    check_changed_blocks,
    check_whole_pool,
)
from impl.core.events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from impl.core.hash_map import BlockHashToBlockMap

NULL_BLOCK_REF_CNT = 1 << 62


def _native_prefetch() -> Callable[[Sequence[object], int, int], None] | None:
    """The compiled build's C `prefetch`, or None (the pure twin, or a build without it)."""
    try:
        from impl.core._prefetch import prefetch
    except ImportError:
        return None
    return prefetch


PREFETCH: Final = _native_prefetch()
"""Asks the CPU for the blocks a loop is about to touch (touch, free): once the pool outgrows
the caches each block is a miss, and a compiled loop body is long enough that the CPU overlaps
only a couple of them. A hint only, no state changes (reports/benchmarks.md, "The misses");
lines naming it are left out of mutation testing (pyproject.toml), as no test could tell."""
PREFETCH_AHEAD: Final = 16
"""Blocks per prefetched stretch: a 256-token request's worth, 24-32 cache lines in flight.
At block 0 a loop asks for the first two stretches, at every later multiple for the stretch
after the next, so a long free or touch keeps a bounded number of lines in flight."""


class BlockPool:
    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool,
        *,
        enable_kv_cache_events: bool,
    ) -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1 (got {num_gpu_blocks})")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(block_id) for block_id in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # Block 0 is the null block: it stands for positions a request no longer needs (outside
        # a sliding window, say), so block tables keep their shape without holding memory.
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # Its reference count is never tracked: start it so high that no sequence of frees can
        # bring it to zero, so hot loops need no `is_null` test to keep it out of the queue.
        self.null_block.ref_cnt = NULL_BLOCK_REF_CNT
        # The prefix-cache index of each KV-cache group, by group id (None: nothing cached
        # yet). A list, not a dict: evicting a block finds its group's map by index, with no
        # boxed key and no hashing (one per evicted block).
        self._hash_maps: list[BlockHashToBlockMap | None] = []
        self.enable_kv_cache_events = enable_kv_cache_events
        self.kv_event_queue: list[KVCacheEvent] = []
        # Blocks changed since the tracker last looked (None: nobody tracks; see
        # `track_changes`). Appended once per call, never per block, on the hot paths.
        self.changed: list[KVCacheBlock] | None = None
        self.tracker: BlockStateTracker | None = None
        # Blocks whose primary key is a sub-block boundary's: block id -> (that key, the
        # prefix length it covers). Read only while the block still has that key, so entries
        # left behind by an eviction or a promotion need no clean-up.
        self._partial_primary: dict[int, tuple[BlockHash, int]] = {}

    def track_changes(self, full_walk_every: int | None = None) -> BlockStateTracker:
        """Keep every block's state as the pool changes (`impl.core.block_states`): counts,
        cached ids and integrity checks then cost what changed, not the pool's size."""
        if self.tracker is None:
            self.tracker = (BlockStateTracker(self.blocks) if full_walk_every is None
                            else BlockStateTracker(self.blocks, full_walk_every))
            self.changed = []
        return self.tracker

    def _refreshed(self) -> BlockStateTracker | None:
        tracker, changed = self.tracker, self.changed
        if tracker is not None and changed is not None and changed:
            tracker.refresh(changed)
            self.changed = []
        return tracker

    # -- prefix-cache lookups -------------------------------------------------------------
    def hash_map(self, group_id: int) -> BlockHashToBlockMap:
        """Group `group_id`'s index, made on first use."""
        if group_id < 0:
            raise ValueError(f"group_id must be >= 0 (got {group_id})")
        maps = self._hash_maps
        while len(maps) <= group_id:
            maps.append(None)
        hash_map = maps[group_id]
        if hash_map is None:
            hash_map = maps[group_id] = BlockHashToBlockMap()
        return hash_map

    def existing_map(self, group_id: int) -> BlockHashToBlockMap | None:
        """Group `group_id`'s index, or None while that group has cached nothing."""
        maps = self._hash_maps
        return maps[group_id] if 0 <= group_id < len(maps) else None

    def maps_by_group(self) -> list[tuple[int, BlockHashToBlockMap]]:
        return [(group_id, hash_map) for group_id, hash_map in enumerate(self._hash_maps)
                if hash_map is not None]

    def get_cached_block(
        self, block_hash: BlockHash, kv_cache_group_ids: Sequence[int]
    ) -> list[KVCacheBlock] | None:
        """One cached block per group for `block_hash`, or None if any group misses."""
        found = []
        for group_id in kv_cache_group_ids:
            hash_map = self.existing_map(group_id)
            block = hash_map.get_one_block(block_hash) if hash_map is not None else None
            if block is None:
                return None
            found.append(block)
        return found

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
        group_id: int,
        *,
        block_size: int,
        token_ids: Sequence[int] = (),
        lora_name: str | None = None,
        block_mask: Sequence[bool] | None = None,
    ) -> None:
        """Index blocks[num_cached_blocks:num_full_blocks] under their hashes.

        `block_hashes[i]` is the hash of block i at this group's block size. Null blocks (skipped
        positions) are not cached, nor blocks whose `block_mask` entry (aligned with the range)
        is False. `token_ids` (the request's tokens) only feeds events.
        """
        if num_cached_blocks >= num_full_blocks:
            return
        hash_map = self.hash_map(group_id)
        stored: list[BlockHash] = []
        for index in range(num_cached_blocks, num_full_blocks):
            block = blocks[index]
            if block.is_null or (block_mask is not None
                                 and not block_mask[index - num_cached_blocks]):
                continue
            block_hash = block_hashes[index]
            if block.block_hash == block_hash:
                stored.append(block_hash)
                continue
            if block.block_hash is not None:
                # A block findable only through a boundary inside it (a prompt-tail entry) is
                # now full: its partial entries go (with removal events) before the full one.
                self._maybe_evict_cached_block(block)
            block.block_hash = block_hash
            block.hash_group_id = group_id
            hash_map.insert(block_hash, block)
            stored.append(block_hash)
            if self.changed is not None:
                self.changed.append(block)
        # One event per call, even when every new block was skipped (null or masked): the
        # event still says which token range the group has now processed.
        if self.enable_kv_cache_events:
            parent = block_hashes[num_cached_blocks - 1] if num_cached_blocks > 0 else None
            start, end = num_cached_blocks * block_size, num_full_blocks * block_size
            self.kv_event_queue.append(
                BlockStored(
                    block_hashes=tuple(stored),
                    parent_block_hash=parent,
                    token_ids=tuple(token_ids[start:end]),
                    block_size=block_size,
                    lora_name=lora_name,
                    group_id=group_id,
                )
            )

    def cache_partial_block(self, block: KVCacheBlock, block_hash: BlockHash, group_id: int,
                            num_tokens: int, *, parent_hash: BlockHash | None = None,
                            token_ids: Sequence[int] = (), lora_name: str | None = None) -> None:
        """Make `block` findable under the hash of a boundary inside it, `num_tokens` into the
        sequence.

        The entry belongs to the block: evicting or resetting the block drops it too. A block
        with no hash yet takes it as its primary hash; a block already cached (a full block)
        keeps its own and carries this one in `extra_hashes`. A block whose primary key is a
        shorter boundary's (a streaming session's prompt grew inside the block) drops every
        key it has first (a removal event each, as upstream does) and takes the new one as
        its primary. For events, `parent_hash` is the hash of the hash block before the
        boundary's and `token_ids` the tokens of the boundary's hash block.
        """
        if block.is_null or block_hash == block.block_hash or (
                block.extra_hashes is not None and block_hash in block.extra_hashes):
            return  # already findable under this hash
        primary = self._partial_primary.get(block.block_id)
        if (primary is not None and block.block_hash == primary[0]
                and primary[1] < num_tokens):
            self._maybe_evict_cached_block(block)  # a shorter boundary's keys give way
        hash_map = self.hash_map(group_id)
        if self.changed is not None:
            self.changed.append(block)
        if block.block_hash is None:
            block.block_hash = block_hash
            block.hash_group_id = group_id
            self._partial_primary[block.block_id] = (block_hash, num_tokens)
        else:
            if block.extra_hashes is None:
                block.extra_hashes = []
            block.extra_hashes.append(block_hash)
        hash_map.insert(block_hash, block)
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(BlockStored(
                block_hashes=(block_hash,), parent_block_hash=parent_hash,
                token_ids=tuple(token_ids), block_size=len(token_ids), lora_name=lora_name,
                group_id=group_id,
            ))

    def move_block_hashes(self, source: KVCacheBlock, target: KVCacheBlock) -> None:
        """Make `target` (fresh, no hash) findable under every hash `source` has, instead of it.

        A running mamba request keeps writing its state into `source`: the prefix cache keeps a
        private copy (`target`, filled by a copy-on-write before the step's forward) under the
        same keys. The entries stay live, so no events."""
        block_hash = source.block_hash
        if block_hash is None:
            return
        group_id = source.hash_group_id
        extra_hashes = source.extra_hashes
        hash_map = self.hash_map(group_id)
        source.reset_hash()
        primary = self._partial_primary.get(source.block_id)
        if primary is not None and primary[0] == block_hash:
            self._partial_primary[target.block_id] = primary
        target.block_hash = block_hash
        target.hash_group_id = group_id
        target.extra_hashes = None if extra_hashes is None else list(extra_hashes)
        for moved in (block_hash, *(extra_hashes or ())):
            hash_map.pop(moved, source.block_id)
            hash_map.insert(moved, target)
        if self.changed is not None:
            self.changed.append(source)
            self.changed.append(target)

    def emit_stored(self, block_hashes: tuple[BlockHash, ...], token_ids: Sequence[int],
                    block_size: int, lora_name: str | None, group_id: int) -> None:
        """A stored event for blocks cached already (a reused prefix, reported in full mode):
        no block changes, the chain starts at token 0 (no parent)."""
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(BlockStored(
                block_hashes=block_hashes, parent_block_hash=None, token_ids=tuple(token_ids),
                block_size=block_size, lora_name=lora_name, group_id=group_id))

    def index_block(self, block: KVCacheBlock, block_hash: BlockHash, group_id: int,
                    extra_hashes: list[BlockHash] | None = None) -> None:
        """Give a block without a hash `block_hash` (and `extra_hashes`, its sub-block keys)
        and index it (no event: a CPU copy takes its GPU source's keys when the store
        completes)."""
        block.block_hash = block_hash
        block.hash_group_id = group_id
        hash_map = self.hash_map(group_id)
        hash_map.insert(block_hash, block)
        if extra_hashes:
            block.extra_hashes = list(extra_hashes)
            for extra in extra_hashes:
                hash_map.insert(extra, block)
        if self.changed is not None:
            self.changed.append(block)

    # -- allocation -----------------------------------------------------------------------
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the head of the free queue, evicting cached content."""
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(
                f"Cannot get {num_blocks} free blocks from the pool "
                f"({self.free_block_queue.num_free_blocks} free)"
            )
        blocks = self.free_block_queue.popleft_n(num_blocks)
        if self.changed is not None:
            self.changed.extend(blocks)
        if self.enable_caching:
            for block in blocks:
                if block.block_hash is not None:
                    # Called on self, not through a bound method held in a local: compiled,
                    # that is a native call; the bound method went through Python's calling
                    # convention for every evicted block (9% of a replay, perf).
                    self._maybe_evict_cached_block(block)
                block.ref_cnt = 1
        else:
            for block in blocks:
                block.ref_cnt = 1
        return blocks

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> None:
        """Drop the block's prefix-cache entries (a removal event per hash); no-op for a block
        without a hash."""
        block_hash = block.block_hash
        if block_hash is None:
            return
        if self.changed is not None:
            self.changed.append(block)
        group_id = block.hash_group_id
        extra_hashes = block.extra_hashes
        block.reset_hash()
        hash_map = self.existing_map(group_id)
        if hash_map is None:
            return
        if extra_hashes is None:  # the common case: one key, one event
            if (hash_map.pop(block_hash, block.block_id) is not None
                    and self.enable_kv_cache_events):
                self.kv_event_queue.append(BlockRemoved(block_hashes=(block_hash,),
                                                        group_id=group_id))
            return
        removed = [h for h in (block_hash, *extra_hashes)
                   if hash_map.pop(h, block.block_id) is not None]
        if self.enable_kv_cache_events:  # one event per hash, as subscribers count them
            self.kv_event_queue.extend(BlockRemoved(block_hashes=(h,), group_id=group_id)
                                       for h in removed)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on prefix-hit blocks, pulling free ones out of the free queue."""
        queue = self.free_block_queue
        batch = _as_list(blocks)
        if self.changed is not None:
            self.changed.extend(batch)
        for index in range(len(batch)):
            if PREFETCH is not None and index % PREFETCH_AHEAD == 0:  # this stretch and the next
                PREFETCH(batch, index + PREFETCH_AHEAD if index else 0, index + 2 * PREFETCH_AHEAD)
            block = batch[index]
            if block.ref_cnt == 0:
                queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block; blocks reaching zero become free.

        `ordered_blocks` is in eviction-preference order (callers pass a request's blocks tail
        first). Freed blocks that carry a hash go to the tail of the free queue; blocks without
        a hash hold nothing worth keeping and go to the front, to be reused first.
        """
        hashed: list[KVCacheBlock] = []
        unhashed: list[KVCacheBlock] = []
        batch = _as_list(ordered_blocks)
        if self.changed is not None:
            self.changed.extend(batch)
        for index in range(len(batch)):
            if PREFETCH is not None and index % PREFETCH_AHEAD == 0:  # this stretch and the next
                PREFETCH(batch, index + PREFETCH_AHEAD if index else 0, index + 2 * PREFETCH_AHEAD)
            block = batch[index]
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt == 0:
                if block.block_hash is None:
                    unhashed.append(block)
                else:
                    hashed.append(block)
        if hashed:
            self.free_block_queue.append_n(hashed)
        if unhashed:
            self.free_block_queue.prepend_n(unhashed)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop the cached content of the given blocks (they stay where they are)."""
        for block_id in block_ids:
            self._maybe_evict_cached_block(self.blocks[block_id])

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; refused (False) while any block is in use."""
        num_used_blocks = self.num_gpu_blocks - self.get_num_free_blocks()
        if num_used_blocks != 1:  # only the null block may be in use
            return False
        self._hash_maps.clear()
        for block in self.blocks:
            block.reset_hash()
        if self.changed is not None:
            self.changed.extend(self.blocks)
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # -- statistics -----------------------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_num_cached_blocks(self) -> int:
        return sum(len(hash_map) for _, hash_map in self.maps_by_group())

    def get_usage(self) -> float:
        usable = self.num_gpu_blocks - 1
        if usable <= 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / usable

    def take_events(self) -> list[KVCacheEvent]:
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    def cached_hashes(self) -> set[tuple[int, BlockHash]]:
        return {(g, h) for g, m in self.maps_by_group() for h in m.hashes()}

    def count_states(self) -> tuple[int, int, int]:
        """(active, cached, empty) over the usable blocks (the null block excluded).

        active: ref_cnt > 0; cached: free with a hash (evictable content); empty: free without.
        Kept as the pool changes when tracked, else counted by a walk.
        """
        tracker = self._refreshed()
        if tracker is not None:
            return tracker.counts[ACTIVE], tracker.counts[CACHED], tracker.counts[EMPTY]
        return self.walk_states()

    def cached_block_ids(self) -> tuple[int, ...]:
        """The ids of the cached (free, hashed) blocks, ascending."""
        tracker = self._refreshed()
        if tracker is not None:
            return tuple(sorted(tracker.cached))
        return tuple(b.block_id for b in self.blocks
                     if b.ref_cnt == 0 and b.block_hash is not None)

    def walk_states(self) -> tuple[int, int, int]:
        active = sum(1 for block in self.blocks[1:] if block.ref_cnt > 0)
        cached = sum(1 for block in self.free_block_queue if block.block_hash is not None)
        return active, cached, self.free_block_queue.num_free_blocks - cached

    def check_integrity(self, holders: dict[int, int] | None = None) -> None:
        """Raise `IntegrityError` unless the four-state invariant holds.

        Tracked (`track_changes`), the check looks at the blocks changed since the last one
        and at the held blocks (`check_changed_blocks`), and walks the whole pool every
        `full_walk_every` checks; untracked, it walks every time.
        """
        tracker = self._refreshed()
        if tracker is not None and not tracker.full_walk_due():
            check_changed_blocks(self, tracker, holders)
            return
        check_whole_pool(self, holders)
        if tracker is not None:
            tracker.check_against(*self.walk_states())
            tracker.unchecked.clear()

def _as_list(blocks: Iterable[KVCacheBlock]) -> list[KVCacheBlock]:
    """`blocks` as a list: compiled, a loop over a list reads its items by index, while any
    other iterable (`reversed(...)`, which every finished request passes) goes through the
    iterator protocol and a type check per item; copying first measured faster."""
    return blocks if isinstance(blocks, list) else list(blocks)

