"""Repetition detection (a request's `repetition_detection`, upstream's sampling parameter of
that name): the engine finishes a request whose output ends in a pattern repeated often enough.

```json
{"type": "request", "request_id": "r1", "max_tokens": 64,
 "repetition_detection": {"max_pattern_size": 4, "min_pattern_size": 1, "min_count": 3}}
```

After each output token (and only once `min_tokens` are out), the request finishes with reason
"repetition" when its last `L * min_count` output tokens are `min_count` copies of its last
`L` tokens, for some pattern length `L` from `min_pattern_size` (0 counts as 1) to
`max_pattern_size`. `max_pattern_size` 0 turns it off. The same values upstream's
`RepetitionDetectionParams` refuses are refused here, with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workloads.errors import WorkloadError


@dataclass(frozen=True, slots=True)
class RepetitionDetection:
    max_pattern_size: int
    min_pattern_size: int = 0
    min_count: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"max_pattern_size": self.max_pattern_size,
                "min_pattern_size": self.min_pattern_size, "min_count": self.min_count}


def checked_repetition_detection(max_pattern_size: int, min_pattern_size: int, min_count: int,
                                 fail: Callable[[str, str], WorkloadError]
                                 ) -> RepetitionDetection:
    """The checked parameters, or the one line upstream's own check would refuse them with
    (sizes are non-negative already: the schema says so)."""
    if min_pattern_size > max_pattern_size:
        raise fail("repetition_detection.min_pattern_size", f"must not exceed max_pattern_size "
                   f"(got {min_pattern_size} > {max_pattern_size}); both 0 turn detection off")
    if max_pattern_size > 0 and min_count < 2:
        raise fail("repetition_detection.min_count", f"must be >= 2 when max_pattern_size is "
                   f"set (got {min_count})")
    return RepetitionDetection(max_pattern_size, min_pattern_size, min_count)
