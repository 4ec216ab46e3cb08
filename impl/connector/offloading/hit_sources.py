"""Which tier a loaded hit came from, for the connector's prefix-cache stats.

A load reads chunks, and each chunk stands for a range of the request's tokens: an attention
group's chunk for the tokens of its blocks that the load fills, a mamba group's state for the
whole reused prefix (one state makes all of it usable). The twin's manager has one tier, host
memory, so a hit's tokens are `host` where any loaded chunk covers them and
`external_unspecified` where none does: the history a sliding window leaves out of its load,
when every group is windowed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.core.prefix_stats import CacheHitSource
from impl.core.specs import MambaSpec

if TYPE_CHECKING:
    from impl.connector.offloading.request_state import GroupShape

TokenRange = tuple[int, int]


def load_ranges(shape: GroupShape, first_block: int, num_local: int, num_cached: int,
                blocks_per_chunk: int) -> list[TokenRange]:
    """The token ranges a group's load covers: it fills blocks from `first_block` up to the
    end of the hit (`num_cached`), reading every chunk from the one `first_block` is in."""
    if isinstance(shape.spec, MambaSpec):
        return [(num_local, num_cached)]
    per_chunk = shape.tokens_per_chunk
    first_token = first_block * shape.tokens_per_block
    last_chunk = -(-num_cached // per_chunk)
    return [(max(first_token, chunk * per_chunk), min(num_cached, (chunk + 1) * per_chunk))
            for chunk in range(first_block // blocks_per_chunk, last_chunk)]


def split_by_source(ranges: list[TokenRange], start: int,
                    num_tokens: int) -> dict[CacheHitSource, int]:
    """`num_tokens` from `start` split into those some range covers (host) and the rest."""
    end = start + num_tokens
    covered = 0
    reached = start  # the covered union so far ends here (ranges taken in order)
    for lo, hi in sorted(ranges):
        lo, hi = max(lo, reached), min(hi, end)
        if lo < hi:
            covered += hi - lo
            reached = hi
    split = {CacheHitSource.HOST: covered, CacheHitSource.EXTERNAL_UNSPECIFIED:
             num_tokens - covered}
    return {source: count for source, count in split.items() if count}
