"""`ContinuumRequestQueue`: FCFS, except that a turn of a job with a live pin goes first.

A warm job's next turn finds its prefix pinned in the cache, so admitting it first turns the
pin into a hit before the pin expires; everyone else keeps arrival order (a preempted request
still goes back to the front). The warm set is refreshed once per step, right after expired
pins are released (`ContinuumPolicy.start_step`), so peek and pop agree within a step.
"""

from __future__ import annotations

from impl.sched.request import Request
from impl.sched.request_queue import FCFSRequestQueue


class ContinuumRequestQueue(FCFSRequestQueue):
    __slots__ = ("warm_jobs",)

    def __init__(self) -> None:
        super().__init__()
        self.warm_jobs: frozenset[str] = frozenset()

    def _next_index(self) -> int:
        """The first request of a warm job, else the head."""
        warm = self.warm_jobs
        if warm:
            for index, request in enumerate(self._queue):
                if request.job_id in warm:
                    return index
        return 0

    def peek_request(self) -> Request:
        if not self._queue:
            raise IndexError("peek from an empty queue")
        return self._queue[self._next_index()]

    def pop_request(self) -> Request:
        index = self._next_index()
        request = self._queue[index]
        del self._queue[index]
        return request
