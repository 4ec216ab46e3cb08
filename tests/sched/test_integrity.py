"""The scheduler's integrity check catches a request lost, duplicated or in the wrong state,
and keeps doing so under `python -O` (it raises `IntegrityError`, it does not assert)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler, step
from vtwin.errors import IntegrityError


def _running_pair() -> Scheduler:
    scheduler = make_scheduler(max_num_seqs=2)
    scheduler.add_request(make_request("a", range(100, 120), max_tokens=8))
    scheduler.add_request(make_request("b", range(200, 220), max_tokens=8))
    scheduler.add_request(make_request("c", range(300, 320), max_tokens=8))
    step(scheduler)
    scheduler.check_integrity()
    return scheduler


def test_a_healthy_run_passes_every_step() -> None:
    scheduler = _running_pair()
    while scheduler.has_unfinished_requests():
        step(scheduler)
        scheduler.check_integrity()


def test_a_request_in_two_queues_is_caught() -> None:
    scheduler = _running_pair()
    scheduler.waiting.add_request(scheduler.running[0])
    with pytest.raises(IntegrityError, match="a .* is in waiting and running"):
        scheduler.check_integrity()


def test_a_request_in_no_queue_is_caught() -> None:
    scheduler = _running_pair()
    scheduler.running.pop()
    with pytest.raises(IntegrityError, match=r"requests in no queue \['b'\]"):
        scheduler.check_integrity()


def test_a_status_that_does_not_match_the_queue_is_caught() -> None:
    scheduler = _running_pair()
    scheduler.running[0].status = RequestStatus.PREEMPTED
    with pytest.raises(IntegrityError, match="a is in running with status PREEMPTED"):
        scheduler.check_integrity()


def test_a_waiting_request_holding_blocks_is_caught() -> None:
    scheduler = _running_pair()
    victim = scheduler.running.pop()
    victim.status = RequestStatus.PREEMPTED
    victim.num_computed_tokens = 0
    scheduler.waiting.prepend_request(victim)  # preempted without freeing its blocks
    with pytest.raises(IntegrityError, match="waiting b holds KV blocks"):
        scheduler.check_integrity()


def test_more_running_than_max_num_seqs_is_caught() -> None:
    scheduler = _running_pair()
    extra = scheduler.waiting.pop_request()
    extra.status = RequestStatus.RUNNING
    scheduler.running.append(extra)
    with pytest.raises(IntegrityError, match="3 running requests, more than max_num_seqs=2"):
        scheduler.check_integrity()


def test_the_check_survives_python_dash_o() -> None:
    code = textwrap.dedent("""
        from tests.sched.helpers import make_request, make_scheduler, step
        from vtwin.errors import IntegrityError
        assert False, "asserts must be off under -O"
    """)
    probe = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    code = textwrap.dedent("""
        from tests.sched.helpers import make_request, make_scheduler, step
        from vtwin.errors import IntegrityError
        s = make_scheduler()
        s.add_request(make_request("a", range(10)))
        step(s)
        s.running.clear()
        try:
            s.check_integrity()
        except IntegrityError as err:
            print("caught:", err)
    """)
    run = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True)
    assert "caught: scheduler: requests in no queue ['a']" in run.stdout, run.stderr
