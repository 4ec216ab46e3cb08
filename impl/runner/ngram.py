"""An n-gram (prompt-lookup) draft proposer: if the sequence's last n tokens occurred before,
propose the tokens that followed that earlier occurrence. No draft model, so spec decode can run
end to end; verification (not this heuristic) decides which tokens are kept."""

from __future__ import annotations

from collections.abc import Sequence


def propose_ngram(token_ids: Sequence[int], num_drafts: int, min_n: int = 1,
                  max_n: int = 3) -> list[int]:
    """Drafts after the most recent earlier match of the longest suffix n-gram (n from max_n
    down to min_n); [] when no suffix recurs."""
    length = len(token_ids)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = list(token_ids[length - n:])
        for start in range(length - n - 1, -1, -1):
            if list(token_ids[start:start + n]) == suffix:
                follow = list(token_ids[start + n:start + n + num_drafts])
                if follow:
                    return follow
    return []
