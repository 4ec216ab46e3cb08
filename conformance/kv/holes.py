"""The KV machine's evictions by block id: holes inside cached runs.

Eviction by pressure takes a run's tail first (a request frees its blocks tail first, a
chunk's blocks leave together) and a hit touches a prefix of a run, so end to end a run's
cached blocks stay a prefix of it. A block in the middle goes only when something evicts by
block id, as a connector's failed load does (`KVCacheManager.evict_blocks`). These rules do
that, so the hit searches meet holes with cached blocks after them: the state where a scan
that goes on past a miss (chunked local) or a hybrid search that does not ask the other types
again (a later type cut the hit) goes wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

if TYPE_CHECKING:
    from conformance.kv.systems import Snapshot

LATE_BLOCKS = 4
"""How far from a cached run's end a hole counts as late (a chunk of the families' 64 tokens
in 16-token blocks)."""


@dataclass(frozen=True, slots=True)
class Hole:
    """A free cached block of a waiting request's run with a cached block of its group after
    it: evicting it leaves a hole the request's hit search meets."""

    request_id: str
    position: int  # in the request's hash blocks
    block_id: int
    group: int
    block_hash: str  # hex
    run_end: int  # the run's last cached position in this group

    @property
    def late(self) -> bool:
        """Within `LATE_BLOCKS` of the run's end, where windows and chunks scan."""
        return self.position >= self.run_end - LATE_BLOCKS


class HoleRules:
    """Rules mixed into `KVLockstepMachine` (which provides what is declared here)."""

    requests: dict[str, Any]

    def both(self, op: str, *args: Any) -> Any:
        raise NotImplementedError

    def _snapshots(self) -> tuple[Snapshot, Snapshot]:
        raise NotImplementedError

    def _has(self, running: bool) -> bool:
        raise NotImplementedError

    def admit(self, data: st.DataObject, chunk: int, lookahead: int, must_fit: bool,
              delay: bool, request: Any = None) -> None:
        raise NotImplementedError

    @rule(data=st.data(), count=st.integers(1, 3))
    def evict_cached(self, data: st.DataObject, count: int) -> None:
        """Evict free cached blocks chosen anywhere in the cache, not in LRU order: holes in the
        middle of cached runs, which a later hit must stop at (a rare state under eviction by
        pressure alone, where a run's tail goes first)."""
        candidates = self._evictable()
        if not candidates:
            return
        chosen = tuple(sorted({data.draw(st.sampled_from(candidates), label="evicted block")
                               for _ in range(count)}))
        note(f"evict cached blocks {list(chosen)}")
        self.both("evict_blocks", chosen)

    @precondition(lambda self: self._has(running=False))
    @rule(data=st.data(), every_group=st.booleans(), chunk=st.integers(1, 80))
    def hole_then_hit(self, data: st.DataObject, every_group: bool, chunk: int) -> None:
        """Evict one block from the middle of a waiting request's cached run, then admit it at
        once: its hit search meets a hole with cached blocks after it, in one group (so that
        group, whichever it is, shortens a hybrid hit) or in every group holding the hash.

        Eviction by pressure takes a run's tail first and a hit touches a prefix of it, so
        end-to-end a run's cached blocks stay a prefix: holes come only from an eviction by
        block id (what a connector's failed load does), which is why this rule aims at them:
        it draws among the holes every waiting request could meet, not among requests."""
        holes = self._inner_cached_blocks()
        # Mostly within a few blocks of the run's end: where a window's or a chunk's scan
        # looks (a hole early in a long run is outside it and changes nothing).
        late = [hole for hole in holes if hole.late]
        if late and data.draw(st.sampled_from((True, True, True, False)), label="late hole"):
            holes = late
        if not holes:
            return
        hole = data.draw(st.sampled_from(holes), label="hole")
        left = self._snapshots()[0]
        free = set(left.free_queue)
        chosen = (tuple(sorted(b for b, _, h in left.cached_blocks
                               if h == hole.block_hash and b in free))
                  if every_group else (hole.block_id,))
        note(f"hole at hash position {hole.position} of {hole.request_id}: evict "
             f"{list(chosen)} ({'every group' if every_group else f'group {hole.group}'})")
        self.both("evict_blocks", chosen)
        self.admit(data, chunk, 0, False, False, self.requests[hole.request_id])

    def _inner_cached_blocks(self) -> list[Hole]:
        """Every hole a waiting request could meet, in a stable order."""
        left = self._snapshots()[0]
        free = set(left.free_queue)
        holes: list[Hole] = []
        for request_id in sorted(r for r, m in self.requests.items() if not m.running):
            position = {h: i for i, h in reversed(list(enumerate(
                left.block_hashes.get(request_id, []))))}
            runs: dict[int, list[tuple[int, int, str]]] = {}
            for block_id, group, hex_hash in left.cached_blocks:
                if hex_hash in position:
                    runs.setdefault(group, []).append((position[hex_hash], block_id, hex_hash))
            for group, run in sorted(runs.items()):
                last = max(at for at, _, _ in run)
                holes += [Hole(request_id, at, block_id, group, hex_hash, last)
                          for at, block_id, hex_hash in sorted(run)
                          if at < last and block_id in free]
        return holes

    def _evictable(self) -> list[int]:
        """The ids of free cached blocks (the only ones eviction may take)."""
        left = self._snapshots()[0]
        free = set(left.free_queue)
        return sorted({block_id for block_id, _, _ in left.cached_blocks if block_id in free})

