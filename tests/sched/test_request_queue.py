from impl.sched.request import Request
from impl.sched.request_queue import FCFSRequestQueue, PriorityRequestQueue


def ids(queue: FCFSRequestQueue | PriorityRequestQueue) -> list[str]:
    return [r.request_id for r in queue]


def test_fcfs_keeps_arrival_order_and_prepends_to_the_front() -> None:
    queue = FCFSRequestQueue()
    a, b, c = (Request(x, [1]) for x in "abc")
    queue.add_request(a)
    queue.add_request(b)
    queue.prepend_request(c)
    assert ids(queue) == ["c", "a", "b"]
    queue.remove_requests([b, c])
    assert ids(queue) == ["a"]


def test_priority_orders_by_priority_then_arrival_then_id() -> None:
    queue = PriorityRequestQueue()
    queue.add_request(Request("late-urgent", [1], priority=0, arrival_time=5.0))
    queue.add_request(Request("b", [1], priority=1, arrival_time=0.0))
    queue.add_request(Request("a", [1], priority=1, arrival_time=0.0))
    queue.add_request(Request("early-urgent", [1], priority=0, arrival_time=1.0))
    assert [queue.pop_request().request_id for _ in range(4)] == [
        "early-urgent", "late-urgent", "a", "b"]


def test_priority_compares_a_queued_requests_current_arrival_time() -> None:
    """Upstream's heap compares the requests themselves, so a session whose next part moves
    its arrival time while it waits is compared by the new time from the next sift on (the
    heap is not rebuilt): a, b, c queued at 1, 2, 3, then c moved to 0. Popping a moves c to
    the root and sifts it below b by the old time no longer: c comes out before b."""
    queue = PriorityRequestQueue()
    a, b, c = (Request(rid, [1], arrival_time=t) for rid, t in (("a", 1.0), ("b", 2.0),
                                                                ("c", 3.0)))
    for request in (a, b, c):
        queue.add_request(request)
    c.arrival_time = 0.0
    assert [queue.pop_request().request_id for _ in range(3)] == ["a", "c", "b"]
