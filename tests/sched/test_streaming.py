"""Streaming-input sessions in the twin's scheduler: turns, waiting, parts, closes."""

from __future__ import annotations

import pytest

from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33
from impl.sched.output import DraftTokenIds
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler, scheduled, step
from vtwin.errors import ReleaseCheckFailed

EOS = 2


def session(request_id: str, prompt: range, max_tokens: int) -> Request:
    return make_request(request_id, prompt, max_tokens=max_tokens, resumable=True)


def part(request_id: str, tokens: list[int], max_tokens: int) -> Request:
    return make_request(request_id, tokens, max_tokens=max_tokens, resumable=True)


def close(request_id: str) -> Request:
    return make_request(request_id, [], max_tokens=1)


def run_turn(s: Scheduler, steps: int) -> list[tuple[str, str | None]]:
    finishes = []
    for _ in range(steps):
        _, outputs = step(s)
        finishes += [(o.request_id, o.finish_reason) for o in outputs if o.finish_reason]
    return finishes


def test_a_turn_ends_without_finishing_and_the_session_waits_with_its_blocks_and_seat() -> None:
    s = make_scheduler(max_num_seqs=2)
    s.add_request(session("s", range(100, 140), max_tokens=3))
    assert run_turn(s, 3) == [("s", "length")]
    request = s.requests["s"]
    assert request.status == RequestStatus.WAITING_FOR_STREAMING_REQ
    assert request.num_computed_tokens == 42  # the last sampled token is not computed
    assert s.kv_cache_manager.get_block_ids("s") == ([1, 2, 3],)
    assert s.num_waiting_for_streaming_input == 1 and s.get_num_unfinished_requests() == 0
    s.add_request(make_request("a", range(200, 210)))
    s.add_request(make_request("b", range(300, 310)))
    out, _ = step(s)
    assert scheduled(out) == {"a": 10}  # the waiting session keeps one of the two seats
    s.check_integrity()


def test_the_next_part_continues_after_the_kept_outputs() -> None:
    s = make_scheduler()
    s.add_request(session("s", range(100, 140), max_tokens=3))
    run_turn(s, 3)
    s.add_request(part("s", [50, 51, 52, 53], max_tokens=2))
    request = s.requests["s"]
    assert request.status == RequestStatus.WAITING
    # 40 prompt tokens, the two computed outputs kept (the stop's last token dropped), 4 new.
    assert request.num_prompt_tokens == 46 and list(request.prompt_token_ids[-4:]) == [
        50, 51, 52, 53]
    assert request.output_token_ids == []
    out, _ = step(s)
    assert [r.req_id for r in out.scheduled_new_reqs] == ["s"]
    assert out.scheduled_new_reqs[0].num_computed_tokens == 42 and scheduled(out) == {"s": 4}
    assert run_turn(s, 1) == [("s", "length")]
    s.check_integrity()


def test_a_part_sent_during_a_turn_waits_and_a_close_sent_during_a_turn_ends_it() -> None:
    s = make_scheduler()
    s.add_request(session("s", range(100, 140), max_tokens=2))
    s.add_request(part("s", [50, 51], max_tokens=2))  # queued: the first turn runs
    s.add_request(close("s"))
    finishes = run_turn(s, 4)
    assert finishes == [("s", "length"), ("s", "length")]
    assert "s" not in s.requests  # closed after its second turn
    s.check_integrity()


def test_a_close_while_waiting_aborts_the_session() -> None:
    s = make_scheduler()
    s.add_request(session("s", range(100, 140), max_tokens=2))
    run_turn(s, 2)
    s.add_request(close("s"))
    assert "s" not in s.requests and s.num_waiting_for_streaming_input == 0
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 63


def test_an_ordinary_request_id_reused_is_refused() -> None:
    s = make_scheduler()
    s.add_request(make_request("r", range(100, 110)))
    with pytest.raises(ValueError, match="id already in use"):
        s.add_request(make_request("r", range(100, 110)))


def test_sessions_under_async_scheduling_are_named_as_not_modelled() -> None:
    s = make_scheduler(asynchronous=True, async_scheduling=True)
    with pytest.raises(NotImplementedError, match="streaming sessions under async"):
        s.add_request(session("s", range(100, 140), max_tokens=2))


@pytest.mark.parametrize("behaviour", [BEHAVIOUR_0_32, BEHAVIOUR_0_33],
                         ids=lambda b: b.release)
def test_what_a_turn_keeps_when_a_stop_trims_verified_drafts(behaviour: object) -> None:
    """Two drafts verified with EOS at the second position: the stop trims the bonus token.
    A session continues after its computed tokens: in 0.32 they ran past the trimmed token, so
    the EOS is kept; 0.33 takes the trimmed token back from the computed count
    (`cache_verified_blocks_on_output`), so it is not. Differentially: the regression
    `session-spec-trim-0.33`."""
    s = make_scheduler(num_spec_tokens=2, behaviour=behaviour)
    s.add_request(session("s", range(100, 120), max_tokens=10))
    step(s)  # prefill: samples 7
    s.update_draft_token_ids(DraftTokenIds(["s"], [[8, EOS]]))
    step(s, token=lambda _: [8, EOS, 9])  # both drafts accepted, EOS stops the turn
    s.add_request(part("s", [50], max_tokens=2))
    request = s.requests["s"]
    kept = list(request.prompt_token_ids[20:])
    assert kept == ([7, 8, EOS, 50] if behaviour is BEHAVIOUR_0_32 else [7, 8, 50])


@pytest.mark.parametrize("behaviour", [BEHAVIOUR_0_32, BEHAVIOUR_0_33],
                         ids=lambda b: b.release)
def test_a_part_already_computed_stops_admission_as_upstream_032_does(
        behaviour: object) -> None:
    """EOS at the first of two verified drafts trims two tokens. In 0.32 the computed count
    (23) stays past the 22 tokens left, so a one-token part makes 23 tokens, all computed:
    upstream asserts on admitting it, and the twin raises `ReleaseCheckFailed`
    ('empty-admission') there (`conformance/upstream_bugs/session-trimmed-drafts-032.jsonl`).
    0.33 took the trimmed tokens back, so the part is one token to compute."""
    s = make_scheduler(num_spec_tokens=2, behaviour=behaviour)
    s.add_request(session("s", range(100, 120), max_tokens=10))
    step(s)  # prefill: samples 7
    s.update_draft_token_ids(DraftTokenIds(["s"], [[EOS, 8]]))
    step(s, token=lambda _: [EOS, 8, 9])  # both drafts accepted, EOS stops the turn
    s.add_request(part("s", [50], max_tokens=2))
    if behaviour is BEHAVIOUR_0_32:
        with pytest.raises(ReleaseCheckFailed, match=r"'empty-admission' fails: waiting "
                           r"request 's' has no token to compute \(23 of its 23 computed; "
                           r"0\.32\.0\)"):
            s.schedule()
    else:
        request = s.requests["s"]
        assert (request.num_computed_tokens, request.num_tokens) == (21, 22)
        assert scheduled(step(s)[0]) == {"s": 3}  # one token, padded to 1 + 2 drafts


def test_integrity_catches_a_lost_waiting_session_count() -> None:
    from vtwin.errors import IntegrityError

    s = make_scheduler()
    s.add_request(session("s", range(100, 140), max_tokens=2))
    run_turn(s, 2)
    s.check_integrity()
    s.num_waiting_for_streaming_input = 0
    with pytest.raises(IntegrityError, match="sessions wait for input"):
        s.check_integrity()


@pytest.mark.parametrize("while_running", [False, True])
def test_a_continuing_session_takes_its_parts_arrival_time(while_running: bool) -> None:
    """A part continues the session as a request that arrived when the part did (what the
    priority policy orders equal priorities by), whether the session waited for it or the
    part was queued during the turn."""
    s = make_scheduler()
    s.add_request(session("s", range(100, 140), max_tokens=3))
    if while_running:
        step(s)
        s.add_request(make_request("s", [50, 51], max_tokens=2, resumable=True,
                                   arrival_time=7.0))
        run_turn(s, 2)
    else:
        run_turn(s, 3)
        s.add_request(make_request("s", [50, 51], max_tokens=2, resumable=True,
                                   arrival_time=7.0))
    assert s.requests["s"].status == RequestStatus.WAITING
    assert s.requests["s"].arrival_time == 7.0
