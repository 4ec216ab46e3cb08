"""Repetition detection: a request whose output ends in a pattern repeated often enough stops.

A request carries `(max_pattern_size, min_pattern_size, min_count)` (upstream's sampling
parameter `repetition_detection`). After each output token, once `min_tokens` are out
(`impl.sched.stop`), the request finishes with reason "repetition" when, for some pattern
length L from `min_pattern_size` (0 counts as 1) up to `max_pattern_size`, its last
L x `min_count` output tokens are `min_count` copies of its last L. The search gives up at the
first L whose copies would not fit the output (no longer one fits either). Nothing is checked
with `max_pattern_size` 0 or `min_count` below 2.
"""

from __future__ import annotations

from collections.abc import Sequence


def ends_in_repetition(tokens: Sequence[int], max_pattern_size: int, min_pattern_size: int,
                       min_count: int) -> bool:
    if max_pattern_size <= 0 or min_count < 2:
        return False
    end = len(tokens)
    for size in range(max(min_pattern_size, 1), max_pattern_size + 1):
        if size * min_count > end:
            return False
        tail = tokens[end - size:end]
        if all(tokens[end - size * (copy + 1):end - size * copy] == tail
               for copy in range(1, min_count)):
            return True
    return False
