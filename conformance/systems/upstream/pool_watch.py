"""Upstream's block states, kept from the calls that change them: O(changed) per step.

The harness compares, after every step, each pool's active/cached/empty counts and its cached
block ids. Walking upstream's pool for them cost O(pool) per step: on a 40,000-block CPU
offload tier, with the twin's walk, most of a conformance run (issue 31). Upstream keeps no such
counts, so `PoolWatch` wraps the pool *instance*'s methods that change a block (a wrapper per
method found on the pool's class; releases differ) and notes the blocks each call was given or
returned. `refresh()` classifies those blocks again, as the twin's `BlockStateTracker` does.
Instance attributes shadow the class's methods, so upstream's own calls (`get_new_blocks`
evicting through `_maybe_evict_cached_block`, `free_blocks` forwarding to another pool) go
through the wrappers too.

A block changed by code that bypasses the pool (a manager writing `ref_cnt` itself) is seen
only if a pool call named it in the same step, as every such write in 0.32.0 does (the
copy-on-write paths touch the same blocks through the pool first). So the watch proves itself:
every `full_walk_every` refreshes it walks the pool and fails, naming both counts, if the kept
states differ; that would be a harness error, not a divergence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from vtwin.errors import HarnessError

ACTIVE, CACHED, EMPTY = 0, 1, 2
FULL_WALK_EVERY = 64
# Methods of upstream's BlockPool (0.19.1 to 0.33.0) that change a block's reference count,
# queue place or hash. Each is wrapped when the pool's class has it.
CHANGING_METHODS = (
    "get_new_blocks", "touch", "free_blocks", "unpin_blocks", "cache_full_blocks",
    "cache_partial_block", "_insert_block_hash", "move_block_hashes",
    "_maybe_evict_cached_block", "_remove_cached_block_hashes",
)


def state_of(block: Any) -> int:
    if block.ref_cnt > 0:
        return ACTIVE
    return EMPTY if block._block_hash is None else CACHED


class PoolWatch:
    """One upstream `BlockPool`'s block states, counts and cached ids."""

    def __init__(self, pool: Any, full_walk_every: int = FULL_WALK_EVERY) -> None:
        self.pool = pool
        self.blocks: list[Any] = pool.blocks
        self.block_type = type(self.blocks[0])
        self.changed: list[Any] = []
        self.everything_changed = False
        self.full_walk_every = full_walk_every
        self.refreshes_since_walk = 0
        self.states = bytearray(len(self.blocks))
        self.counts = [0, 0, 0]
        self.cached: set[int] = set()
        self._recount()
        for name in CHANGING_METHODS:
            if hasattr(type(pool), name):
                setattr(pool, name, self._noting(getattr(pool, name)))
        if hasattr(type(pool), "evict_blocks"):
            pool.evict_blocks = self._noting_ids(pool.evict_blocks)
        if hasattr(type(pool), "reset_prefix_cache"):
            pool.reset_prefix_cache = self._noting_all(pool.reset_prefix_cache)

    # -- wrappers ---------------------------------------------------------------------------
    def _blocks_in(self, value: Any) -> Iterator[Any]:
        if isinstance(value, self.block_type):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, self.block_type))

    def _noting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def noting(*args: Any, **kwargs: Any) -> Any:
            # An iterator argument (`reversed(blocks)`) is read once by the call: read it
            # here into a list, which the call then reads the same way.
            args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
            kwargs = {k: list(v) if isinstance(v, Iterator) else v for k, v in kwargs.items()}
            result = method(*args, **kwargs)
            for value in (*args, *kwargs.values(), result):
                self.changed.extend(self._blocks_in(value))
            return result
        return noting

    def _noting_ids(self, method: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def noting_ids(block_ids: Any) -> Any:
            ids = list(block_ids)
            result = method(type(block_ids)(ids) if isinstance(block_ids, (set, frozenset))
                            else ids)
            self.changed.extend(self.blocks[i] for i in ids if 0 <= i < len(self.blocks))
            return result
        return noting_ids

    def _noting_all(self, method: Callable[[], Any]) -> Callable[[], Any]:
        def noting_all() -> Any:
            result = method()
            self.everything_changed = True
            return result
        return noting_all

    # -- states -----------------------------------------------------------------------------
    def _recount(self) -> None:
        self.counts = [0, 0, 0]
        self.cached = set()
        for block in self.blocks[1:]:
            state = state_of(block)
            self.states[block.block_id] = state
            self.counts[state] += 1
            if state == CACHED:
                self.cached.add(block.block_id)

    def refresh(self) -> None:
        """Classify the blocks changed since the last refresh again; every
        `full_walk_every` refreshes, prove the kept states against a walk."""
        if self.everything_changed:
            self.everything_changed = False
            self.changed.clear()
            self._recount()
        changed, self.changed = self.changed, []
        states, counts, cached, blocks = self.states, self.counts, self.cached, self.blocks
        for block in changed:
            block_id = block.block_id
            if block_id == 0 or blocks[block_id] is not block:
                continue  # the null block, or a block of another pool passing through
            old, new = states[block_id], state_of(block)
            if old != new:
                states[block_id] = new
                counts[old] -= 1
                counts[new] += 1
                if old == CACHED:
                    cached.discard(block_id)
                elif new == CACHED:
                    cached.add(block_id)
        self.refreshes_since_walk += 1
        if self.refreshes_since_walk >= self.full_walk_every:
            self.refreshes_since_walk = 0
            self.prove()

    def prove(self) -> None:
        kept = (list(self.counts), set(self.cached))
        self._recount()
        if kept != (self.counts, self.cached):
            raise HarnessError(
                f"upstream pool watch: kept active/cached/empty {tuple(kept[0])} but a walk "
                f"counts {tuple(self.counts)}: upstream changed blocks outside the pool "
                "methods the watch wraps (conformance/systems/upstream/pool_watch.py)")

    def block_counts(self) -> tuple[int, int, int]:
        self.refresh()
        return self.counts[ACTIVE], self.counts[CACHED], self.counts[EMPTY]

    def cached_ids(self) -> tuple[int, ...]:
        """The cached block ids, ascending (refresh first)."""
        return tuple(sorted(self.cached))
