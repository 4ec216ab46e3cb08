"""The store threshold's offer counter: how many times each key has been offered for storing.

With `store_threshold` >= 2 a new chunk is stored only once it was offered that often, so a
block computed once (a one-off prompt) never takes a CPU slot. The counter remembers at most
`max_size` keys; a new key pushes out the one offered longest ago, but never one offered in
the same call (when the counter is full of those, the new key is not counted at all).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from impl.connector.offloading.keys import OffloadKey


class OfferTracker:
    def __init__(self, threshold: int, max_size: int) -> None:
        self.threshold = threshold
        self.max_size = max_size
        self.counts: OrderedDict[OffloadKey, int] = OrderedDict()
        self.skipped = 0

    def record(self, keys: Sequence[OffloadKey]) -> None:
        """Count one offer of `keys`."""
        again: set[OffloadKey] = set()
        for key in keys:
            if key in self.counts:
                self.counts[key] += 1
                self.counts.move_to_end(key)
                again.add(key)
        forgettable = len(self.counts) - len(again)
        for key in keys:
            if key in self.counts:
                continue
            if len(self.counts) >= self.max_size:
                if forgettable == 0:
                    continue
                self.counts.popitem(last=False)
                forgettable -= 1
            self.counts[key] = 1

    def admitted(self, candidates: list[OffloadKey]) -> list[OffloadKey]:
        """The candidates offered often enough; the rest are counted as skipped."""
        kept = [key for key in candidates if self.counts.get(key, 0) >= self.threshold]
        self.skipped += len(candidates) - len(kept)
        return kept

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped
