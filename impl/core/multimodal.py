"""`MultiModalFeature`: one multimodal input of a request, as the scheduler and hasher see it.

The item's placeholders are prompt tokens `offset .. offset + length`; the encoder produces one
embedding per placeholder marked in `is_embed` (None: every placeholder). Budgets and the
encoder cache count embeddings, not placeholders, so break tokens inside an image cost nothing.
A request's features are sorted by offset and never overlap, which lets both lookups below
bisect instead of scanning.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import accumulate


class MultiModalFeature:
    __slots__ = ("identifier", "offset", "length", "_embeds_through")

    def __init__(self, identifier: str, offset: int, length: int,
                 is_embed: Sequence[bool] | None = None) -> None:
        self.identifier = identifier
        self.offset = offset
        self.length = length
        # Embeddings among placeholders 0..i, for each i (None: one per placeholder).
        self._embeds_through: list[int] | None = (
            None if is_embed is None else list(accumulate(int(e) for e in is_embed)))

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def num_embeds(self) -> int:
        through = self._embeds_through
        if through is None:
            return self.length
        return through[-1] if through else 0

    def embeds_in_range(self, start: int, end: int) -> tuple[int, int]:
        """The embeddings (first, past-last index) behind placeholders `start .. end` of this
        item (positions relative to its offset; `end` >= 1: the range overlaps the item)."""
        through = self._embeds_through
        if through is None:
            return start, end
        return (through[start - 1] if start > 0 else 0), through[end - 1]

    def __repr__(self) -> str:
        return f"MultiModalFeature({self.identifier!r}, {self.offset}, {self.length})"


def features_in_window(features: Sequence[MultiModalFeature], start: int,
                       end: int) -> tuple[int, int]:
    """Indices `lo, hi` of the features whose placeholders overlap tokens `start .. end`."""
    lo = bisect.bisect_left(features, start + 1, key=_end_of)
    hi = bisect.bisect_left(features, end, key=_offset_of)
    return lo, hi


def mm_hash_keys(features: Sequence[MultiModalFeature], start: int,
                 end: int) -> list[tuple[str, str, int]]:
    """The block-hash extra keys of a block of tokens `start .. end`: one `("mm", identifier,
    item offset - block start)` per item the block overlaps, so equal tokens showing another
    image (or the same image elsewhere in the block) hash apart."""
    if not features:
        return []
    lo, hi = features_in_window(features, start, end)
    return [("mm", f.identifier, f.offset - start) for f in features[lo:hi]]


def _end_of(feature: MultiModalFeature) -> int:
    return feature.offset + feature.length


def _offset_of(feature: MultiModalFeature) -> int:
    return feature.offset
