"""Streaming-input sessions: one request whose input arrives in parts under the same id.

A realtime client (speech, a live transcript) opens a *resumable* request and keeps sending
input. Each part is a turn: the request computes the new input and generates up to that part's
`max_tokens`; then, instead of finishing, it waits for the next part (holding its KV blocks and
a seat) and continues from what it computed, the new part appended after its kept outputs.
The session ends when the client closes it (`stream_end_step`): at once if it is waiting, or
after the turn in progress.

In a workload a session is a request with `stream_end_step` (and so resumable) and `stream`,
its later parts, each added at its own step; a part that arrives while a turn runs is queued.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.errors import WorkloadError


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One later input part of a session: its tokens, added at `arrival_step`, and how many
    tokens its turn may generate."""

    arrival_step: int
    prompt_token_ids: tuple[int, ...]
    max_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"arrival_step": self.arrival_step,
                "prompt_token_ids": list(self.prompt_token_ids),
                "max_tokens": self.max_tokens}


def check_stream(arrival_step: int, prompt_len: int, max_tokens: int,
                 chunks: Sequence[StreamChunk], end_step: int | None, max_model_len: int,
                 fail: Callable[[str, str], WorkloadError]) -> None:
    """`fail(field, problem)` for a stream that cannot be meant: parts without an end, parts
    out of order or before the request, an end before the last part, or a session whose
    prompt can grow past `max_model_len` (each turn keeps its outputs)."""
    if end_step is None:
        if chunks:
            raise fail("stream", "needs 'stream_end_step' (when the client closes the session)")
        return
    previous = arrival_step
    for index, chunk in enumerate(chunks):
        if chunk.arrival_step < previous:
            raise fail(f"stream[{index}].arrival_step", f"{chunk.arrival_step} comes before "
                       f"step {previous} (the request or the part before it)")
        previous = chunk.arrival_step
    if end_step < previous:
        raise fail("stream_end_step", f"{end_step} comes before the last part (step "
                   f"{previous})")
    longest = prompt_len + max_tokens + sum(len(c.prompt_token_ids) + c.max_tokens
                                            for c in chunks)
    if longest > max_model_len:
        raise fail("stream", f"the session can grow to {longest} tokens, past max_model_len "
                   f"{max_model_len}")
