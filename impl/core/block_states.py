"""Which state each block of a pool is in, kept as the pool changes: O(changed) per step.

Every usable block is active (ref_cnt > 0), cached (free, with a hash: evictable content) or
empty (free, no hash). The harness reads the three counts and the cached block ids after every
step, and checks the pool's integrity after every step. Both used to walk the whole pool: on a
40,000-block CPU offload tier that walk was most of a run's time (issue 31), although a step
changes a few dozen blocks.

With tracking on (`BlockPool.track_changes()`), the pool appends each block it changes (takes,
touches, frees, hashes or evicts) to a list. `refresh()` classifies only those blocks again,
keeping the counts and the set of cached ids; every block it reclassifies waits in
`unchecked` for the next integrity check, which looks at those blocks alone (see
`BlockPool.check_integrity`) and walks the whole pool only every `full_walk_every` checks,
where it also proves the kept counts equal a full count. Without tracking, nothing is appended
and the pool counts by walking, as before.
"""

from __future__ import annotations

from typing import Final, Protocol

from impl.core.block import FreeKVCacheBlockQueue, KVCacheBlock
from impl.core.hash_map import BlockHashToBlockMap
from vtwin.errors import IntegrityError, require

ACTIVE: Final = 0
CACHED: Final = 1
EMPTY: Final = 2
FULL_WALK_EVERY: Final = 64
"""Integrity checks between two walks of the whole pool: a fault that no block change shows
(a hash-index entry left behind, a reference held by no table) is found within this many
steps, at 1/64 of a walk's cost per step."""


class BlockPool(Protocol):
    """What the checks read of `impl.core.block_pool.BlockPool` (which imports this module)."""

    blocks: list[KVCacheBlock]
    free_block_queue: FreeKVCacheBlockQueue
    null_block: KVCacheBlock
    num_gpu_blocks: int

    def existing_map(self, group_id: int) -> BlockHashToBlockMap | None: ...

    def maps_by_group(self) -> list[tuple[int, BlockHashToBlockMap]]: ...

    def walk_states(self) -> tuple[int, int, int]: ...


def state_of(block: KVCacheBlock) -> int:
    if block.ref_cnt > 0:
        return ACTIVE
    return EMPTY if block.block_hash is None else CACHED


class BlockStateTracker:
    """The state of every usable block, the count of each state and the cached ids."""

    def __init__(self, blocks: list[KVCacheBlock], full_walk_every: int = FULL_WALK_EVERY
                 ) -> None:
        if full_walk_every < 1:
            raise ValueError(f"full_walk_every must be >= 1 (got {full_walk_every})")
        self.blocks = blocks
        self.states = bytearray(len(blocks))  # entry 0 (the null block) is never read
        self.counts = [0, 0, 0]
        self.cached: set[int] = set()
        self.unchecked: set[int] = set()
        self.full_walk_every = full_walk_every
        self.checks_since_full_walk = 0
        for block in blocks[1:]:
            state = state_of(block)
            self.states[block.block_id] = state
            self.counts[state] += 1
            if state == CACHED:
                self.cached.add(block.block_id)

    def refresh(self, changed: list[KVCacheBlock]) -> None:
        """Classify the `changed` blocks again (a block may be listed more than once)."""
        states, counts, cached, unchecked = self.states, self.counts, self.cached, self.unchecked
        for block in changed:
            block_id = block.block_id
            if block_id == 0:
                continue  # the null block: never counted
            unchecked.add(block_id)
            old = states[block_id]
            new = state_of(block)
            if new == old:
                continue
            states[block_id] = new
            counts[old] -= 1
            counts[new] += 1
            if old == CACHED:
                cached.discard(block_id)
            elif new == CACHED:
                cached.add(block_id)

    def take_unchecked(self) -> list[KVCacheBlock]:
        blocks = [self.blocks[block_id] for block_id in sorted(self.unchecked)]
        self.unchecked.clear()
        return blocks

    def full_walk_due(self) -> bool:
        """Count one integrity check; True when this one must walk the whole pool."""
        self.checks_since_full_walk += 1
        if self.checks_since_full_walk < self.full_walk_every:
            return False
        self.checks_since_full_walk = 0
        return True

    def check_against(self, active: int, cached: int, empty: int) -> None:
        """The kept counts equal a full walk's, and so does every kept state."""
        kept = (self.counts[ACTIVE], self.counts[CACHED], self.counts[EMPTY])
        if kept != (active, cached, empty):
            raise IntegrityError(f"block states: kept active/cached/empty {kept} != "
                                 f"{(active, cached, empty)} walked")
        for block in self.blocks[1:]:
            if self.states[block.block_id] != state_of(block):
                raise IntegrityError(f"block states: {block} kept as state "
                                     f"{self.states[block.block_id]}, is {state_of(block)}")
        if len(self.cached) != cached:
            raise IntegrityError(f"block states: {len(self.cached)} cached ids kept, "
                                 f"{cached} cached blocks")


def check_changed_blocks(pool: BlockPool, tracker: BlockStateTracker,
                         holders: dict[int, int] | None) -> None:
    """The pool's integrity where it can have changed since the last check.

    - the free queue holds as many blocks as the kept counts call free;
    - each changed block: not a second null block, linked into the free queue exactly when
      its ref_cnt is 0 (its neighbours link back to it), and indexed under each of its hashes;
    - with `holders` (block id -> block tables holding it): every held block's ref_cnt equals
      its holders, and there are as many held blocks as active ones, so no active block is
      held by nobody (a leak).

    What a change of no block can break (an index entry left pointing at a block that lost
    its hash) waits for the next full walk.
    """
    free = tracker.counts[CACHED] + tracker.counts[EMPTY]
    queued = pool.free_block_queue.num_free_blocks
    if free != queued:
        raise IntegrityError(f"block pool: {queued} blocks queued, {free} counted free")
    for block in tracker.take_unchecked():
        _check_block(pool, block)
    if holders is None:
        return
    held = 0
    for block_id, count in holders.items():
        if block_id == 0:
            continue  # the null block's references are not counted
        held += 1
        block = pool.blocks[block_id]
        if block.ref_cnt != count:
            raise IntegrityError(f"block pool: {block} ref_cnt {block.ref_cnt} != {count} "
                                 "holders")
    if held != tracker.counts[ACTIVE]:
        raise IntegrityError(f"block pool: {tracker.counts[ACTIVE]} active blocks, {held} "
                             "held by a block table")


def _check_block(pool: BlockPool, block: KVCacheBlock) -> None:
    if block.is_null:
        raise IntegrityError(f"block pool: {block} is a second null block")
    before, after = block.prev_free, block.next_free
    linked = before is not None
    if before is not None and (after is None or before.next_free is not block
                               or after.prev_free is not block):
        raise IntegrityError(f"block pool: {block} has broken free-queue links")
    if linked != (block.ref_cnt == 0):
        raise IntegrityError(f"block pool: {block} free={linked} disagrees with its ref_cnt")
    if block.block_hash is None:
        return
    hash_map = pool.existing_map(block.hash_group_id)
    for block_hash in (block.block_hash, *(block.extra_hashes or ())):
        if hash_map is None or not hash_map.contains(block_hash, block.block_id):
            raise IntegrityError(f"block pool: {block} has a hash but is not indexed")


def check_whole_pool(pool: BlockPool, holders: dict[int, int] | None) -> None:
    """The whole pool. Opens with the conservation law: every usable block is active,
    cached or empty, exactly once. A block lost from both the queue and every table, or
    queued twice, breaks the sum before any per-block rule is looked at. `holders` (block
    id -> number of block tables holding it) also checks reference counts."""
    active, cached, empty = pool.walk_states()
    usable = pool.num_gpu_blocks - 1
    if active + cached + empty != usable:
        raise IntegrityError(
            f"block pool: active {active} + cached {cached} + empty {empty} "
            f"!= {usable} usable blocks"
        )
    pool.free_block_queue.check_integrity()
    null = pool.null_block
    require(null.block_id == 0 and null.is_null, f"block pool: null block is {null}")
    free_ids = set(pool.free_block_queue.block_ids())  # the queue holds no null block (above)
    indexed: dict[int, int] = {}
    for group_id, hash_map in pool.maps_by_group():
        for block_hash, block in hash_map.items():
            keys = [block.block_hash, *(block.extra_hashes or ())]
            if block_hash not in keys or block.hash_group_id != group_id:
                raise IntegrityError(f"block pool: index entry {block_hash.hex()[:8]}"
                                     f"/g{group_id} points at {block}")
            indexed[block.block_id] = indexed.get(block.block_id, 0) + 1
    for block_id, count in indexed.items():
        block = pool.blocks[block_id]
        if count != 1 + len(block.extra_hashes or ()):
            raise IntegrityError(f"block pool: {block} indexed {count} times")
    for block in pool.blocks[1:]:
        if block.is_null:
            raise IntegrityError(f"block pool: {block} is a second null block")
        if (block.block_id in free_ids) != (block.ref_cnt == 0):
            raise IntegrityError(f"block pool: {block} free={block.block_id in free_ids} "
                                 f"disagrees with its ref_cnt")
        if block.block_hash is not None and block.block_id not in indexed:
            raise IntegrityError(f"block pool: {block} has a hash but is not indexed")
        if holders is not None and block.ref_cnt != holders.get(block.block_id, 0):
            raise IntegrityError(f"block pool: {block} ref_cnt {block.ref_cnt} != "
                                 f"{holders.get(block.block_id, 0)} holders")
