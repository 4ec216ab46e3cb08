"""Repetition detection (`impl.sched.repetition`, `impl.sched.stop`): which output tails count
as repeated, and where the check sits among the stop rules (after EOS, stop ids and the length
caps; held back until `min_tokens` are out), with the request's finish reason."""

from __future__ import annotations

import pytest

from impl.sched.repetition import ends_in_repetition
from impl.sched.request import Request, RequestStatus
from impl.sched.stop import check_stop


@pytest.mark.parametrize(("tokens", "params", "found"), [
    ([5, 7, 7, 7], (1, 1, 3), True),  # one token three times
    ([7, 5, 7, 7], (1, 1, 3), False),
    ([1, 2, 1, 2], (2, 2, 2), True),  # a pair twice
    ([1, 2, 1, 2], (1, 1, 2), False),  # only length 1 is searched
    ([1, 2, 1, 2], (2, 0, 2), True),  # min 0 counts as 1, then 2 matches
    ([3, 1, 2, 3, 1, 2], (3, 3, 2), True),
    ([3, 1, 2, 3, 1, 2], (4, 3, 2), True),
    ([9, 9], (0, 0, 0), False),  # max 0: off
    ([9, 9, 9], (1, 1, 1), False),  # a count below 2: off
    ([4, 9, 9], (3, 2, 2), False),  # a pair would need 4 tokens, longer patterns more
    ([1, 2, 1, 2], (3, 2, 2), True),  # a pair fits in 4 and repeats
])
def test_a_tail_repeats_when_its_last_pattern_appears_min_count_times(
        tokens: list[int], params: tuple[int, int, int], found: bool) -> None:
    assert ends_in_repetition(tokens, *params) is found


def _request(outputs: list[int], min_tokens: int = 0, max_tokens: int = 16,
             detection: tuple[int, int, int] | None = (1, 1, 2)) -> Request:
    request = Request("r", range(4), max_tokens=max_tokens, eos_token_id=2,
                      stop_token_ids=(13,), min_tokens=min_tokens,
                      repetition_detection=detection)
    request.append_output_token_ids(outputs)
    return request


def test_a_repeated_tail_finishes_the_request_with_reason_repetition() -> None:
    request = _request([5, 6, 6])
    assert check_stop(request, max_model_len=64)
    assert request.status == RequestStatus.FINISHED_REPETITION
    assert request.get_finished_reason() == "repetition"
    assert request.stop_reason == "repetition_detected"
    assert not check_stop(_request([5, 6, 6], detection=None), max_model_len=64)


def test_min_tokens_holds_detection_back_but_not_the_other_stops() -> None:
    held = _request([6, 6, 6], min_tokens=4)
    assert not check_stop(held, max_model_len=64)
    assert check_stop(_request([6, 6, 6, 6], min_tokens=4), max_model_len=64)
    eos = _request([6, 2], min_tokens=4)  # EOS is checked before min_tokens (the sampler
    assert check_stop(eos, max_model_len=64)  # never emits it that early anyway)
    assert eos.status == RequestStatus.FINISHED_STOPPED


def test_the_length_cap_comes_before_detection() -> None:
    request = _request([6, 6], max_tokens=2)
    assert check_stop(request, max_model_len=64)
    assert request.status == RequestStatus.FINISHED_LENGTH_CAPPED
    stop_id = _request([13, 13])  # a stop token repeated: the stop token wins
    assert check_stop(stop_id, max_model_len=64)
    assert (stop_id.status, stop_id.stop_reason) == (RequestStatus.FINISHED_STOPPED, 13)
