"""The queue factory: the waiting queue a scheduling policy runs on.

It lives apart from the queues themselves because the Continuum queue builds on the FCFS one:
with the factory beside FCFS, `request_queue` and `continuum.queue` would import each other."""

from __future__ import annotations

from impl.sched.continuum.queue import ContinuumRequestQueue
from impl.sched.request_queue import FCFSRequestQueue, PriorityRequestQueue


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    """The waiting queue of `policy` (fcfs, priority or continuum)."""
    if policy == "priority":
        return PriorityRequestQueue()
    if policy == "fcfs":
        return FCFSRequestQueue()
    if policy == "continuum":  # FCFS with warm jobs first
        return ContinuumRequestQueue()
    raise ValueError(f"policy: unknown scheduling policy {policy!r}")
