"""`PauseState`: whether the scheduler is held by its operator (draining, weight updates).

| state        | running requests | requests holding KV blocks | other waiting requests |
| ------------ | ---------------- | -------------------------- | ---------------------- |
| `UNPAUSED`   | scheduled        | admitted                   | admitted               |
| `PAUSED_NEW` | scheduled        | admitted (their loads)     | stay queued            |
| `PAUSED_ALL` | not scheduled    | not admitted               | stay queued            |

While paused, the requests held back do not count as unfinished (an engine with nothing it
may schedule has nothing to step for), which also decides whether the long-prefill threshold
applies (it does only when requests compete).
"""

from __future__ import annotations

import enum


class PauseState(enum.IntEnum):
    UNPAUSED = 0
    PAUSED_NEW = 1
    PAUSED_ALL = 2
