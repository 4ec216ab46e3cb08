"""Waiting queues: FCFS (a deque) and priority (a heap).

FCFS keeps arrival order and lets a preempted request jump back to the front. Priority orders
by (priority, arrival time, request id): lower values first; "prepending" there cannot jump the
order, so it is an ordinary insertion. Both have upstream's whole queue interface (also what
the scheduler never calls, for plugins): peeking or popping an empty queue raises IndexError,
removing a request that is not queued raises ValueError
(`conformance/tests/test_request_queue_differential.py` holds them to upstream's).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from impl.sched.request import Request


class RequestQueue(Protocol):
    def add_request(self, request: Request) -> None: ...
    def pop_request(self) -> Request: ...
    def peek_request(self) -> Request: ...
    def prepend_request(self, request: Request) -> None: ...
    def prepend_requests(self, requests: Iterable[Request]) -> None: ...
    def remove_request(self, request: Request) -> None: ...
    def remove_requests(self, requests: Iterable[Request]) -> None: ...
    def __bool__(self) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Request]: ...


class FCFSRequestQueue:
    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        self._queue.append(request)

    def pop_request(self) -> Request:
        return self._queue.popleft()

    def peek_request(self) -> Request:
        if not self._queue:
            raise IndexError("peek from an empty queue")
        return self._queue[0]

    def prepend_request(self, request: Request) -> None:
        self._queue.appendleft(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Put `requests` in front, one at a time: they end up in reverse order."""
        self._queue.extendleft(requests)

    def remove_request(self, request: Request) -> None:
        """Remove `request` (ValueError when it is not queued)."""
        self._queue.remove(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        doomed = set(map(id, requests))
        if doomed:
            self._queue = deque(r for r in self._queue if id(r) not in doomed)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class _Queued:
    """A heap entry ordered by its request's *current* priority, arrival time and id, as
    upstream's heap of requests is (it compares the requests themselves): a streaming session
    whose next part moves its arrival time while it waits in the heap is compared by the new
    time from then on, though the heap was built with the old one. The last tie-break is
    insertion order, never object identity."""

    __slots__ = ("request", "order")

    def __init__(self, request: Request, order: int) -> None:
        self.request = request
        self.order = order

    def __lt__(self, other: _Queued) -> bool:
        mine, theirs = self.request, other.request
        if mine.priority != theirs.priority:
            return mine.priority < theirs.priority
        if mine.arrival_time != theirs.arrival_time:
            return mine.arrival_time < theirs.arrival_time
        if mine.request_id != theirs.request_id:
            return mine.request_id < theirs.request_id
        return self.order < other.order


class PriorityRequestQueue:
    __slots__ = ("_heap", "_counter")

    def __init__(self) -> None:
        self._heap: list[_Queued] = []
        self._counter = 0

    def add_request(self, request: Request) -> None:
        self._counter += 1
        heapq.heappush(self._heap, _Queued(request, self._counter))

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap).request

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0].request

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Insert each of `requests`: a priority queue has no front to jump to."""
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        """Remove `request` (ValueError when it is not queued)."""
        for index, entry in enumerate(self._heap):
            if entry.request is request:
                self._heap[index] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return
        raise ValueError("request is not in the queue")

    def remove_requests(self, requests: Iterable[Request]) -> None:
        doomed = set(map(id, requests))
        if doomed:
            self._heap = [entry for entry in self._heap if id(entry.request) not in doomed]
            heapq.heapify(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry.request for entry in sorted(self._heap))


