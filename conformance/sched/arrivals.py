"""When requests arrive: at their step, or, closed-loop, a gap after another one finishes.

A request with `after` is an agent's next turn: it arrives `gap_ms` (in steps of the
workload's `step_ms`) after its predecessor finishes, and its prompt is the predecessor's
whole prompt, plus the tokens the predecessor output, plus its own new tokens. Both depend on
the run, so the driver releases such a request only when it sees the predecessor finish (an
output with a finish reason, or an abort), at that step + 1 + the gap in whole steps. Two
systems that agree step by step therefore see the same arrivals; once they disagree the
comparison has already stopped.

Ties are broken by insertion order: requests of the file first (in its order), then released
followers in the order their predecessors finished, so every process adds them identically.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Iterator

from workloads.model import RequestSpec, Workload, gap_steps


class Arrivals:
    """The pending arrivals of one run (one per driver; nothing is shared between runs)."""

    def __init__(self, workload: Workload) -> None:
        self._step_ms = workload.step_ms or 1.0
        self._heap: list[tuple[int, int, RequestSpec]] = []
        self._count = 0
        self._followers: dict[str, list[RequestSpec]] = {}
        self._prompts: dict[str, tuple[int, ...]] = {}  # whole prompts of predecessors
        self._outputs: dict[str, list[int]] = {}  # their output tokens so far
        self.arrived: dict[str, int] = {}  # request id -> the step it was added at
        known = {r.request_id for r in workload.requests}
        for request in workload.requests:
            if request.after is None or request.after.request_id not in known:
                # A follower whose predecessor is gone (a shrunk workload) arrives on its own,
                # at its earliest step, rather than wait for a finish that never comes.
                self._push(request.arrival_step, request)
            else:
                self._followers.setdefault(request.after.request_id, []).append(request)

    def _push(self, step: int, request: RequestSpec) -> None:
        self._count += 1
        heapq.heappush(self._heap, (step, self._count, request))

    def __bool__(self) -> bool:
        return bool(self._heap or self._followers)

    def add(self, step: int, request: RequestSpec) -> None:
        """A request sent during the run (a P/D pair's router), arriving at `step`."""
        self._push(step, request)

    def due(self, step: int) -> Iterator[RequestSpec]:
        """The requests arriving at `step` (or before), in arrival order."""
        while self._heap and self._heap[0][0] <= step:
            request = heapq.heappop(self._heap)[2]
            self.arrived[request.request_id] = step
            if request.request_id in self._followers:
                self._prompts[request.request_id] = request.prompt_token_ids
                self._outputs[request.request_id] = []
            yield request

    def observe(self, step: int, outputs: Iterable[tuple[str, tuple[int, ...], bool]],
                aborted: Iterable[str]) -> None:
        """This step's outputs `(request id, new tokens, finished)` and aborts: a finished
        predecessor releases its followers."""
        for rid, tokens, finished in outputs:
            history = self._outputs.get(rid)
            if history is not None:
                history.extend(tokens)
                if finished:
                    self._release(rid, step)
        for rid in aborted:
            if rid in self._outputs:
                self._release(rid, step)

    def _release(self, rid: str, step: int) -> None:
        prompt = self._prompts.pop(rid) + tuple(self._outputs.pop(rid))
        for follower in self._followers.pop(rid, ()):
            assert follower.after is not None
            arrival = step + 1 + gap_steps(follower.after.gap_ms, self._step_ms)
            self._push(arrival, dataclasses.replace(
                follower, arrival_step=arrival, prompt_spec=None,
                prompt_token_ids=prompt + follower.prompt_token_ids))
