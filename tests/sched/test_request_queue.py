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
