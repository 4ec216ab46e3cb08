"""`Request`: the defaults callers rely on, the status classes, output tokens and their hashes."""

from impl.core.request_hasher import RequestBlockHasher
from impl.sched.request import Request, RequestStatus
from tests.sched.helpers import NONE_HASH


def test_defaults_follow_vllm_sampling_params() -> None:
    """max_tokens defaults to 16 as in vLLM's SamplingParams; no priority boost, arrival 0."""
    request = Request("r", [1, 2, 3])
    assert (request.max_tokens, request.priority, request.arrival_time) == (16, 0, 0.0)
    assert request.status == RequestStatus.WAITING and request.num_cached_tokens < 0


def test_finished_statuses_are_exactly_those_after_preempted() -> None:
    finished = {s for s in RequestStatus if RequestStatus.is_finished(s)}
    assert finished == {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED,
                        RequestStatus.FINISHED_ABORTED, RequestStatus.FINISHED_IGNORED,
                        RequestStatus.FINISHED_ERROR, RequestStatus.FINISHED_REPETITION}
    request = Request("r", [1])
    for status in RequestStatus:
        request.status = status
        assert request.is_finished() == (status in finished)


def test_output_tokens_extend_the_hashes_block_by_block() -> None:
    hasher = RequestBlockHasher(4, "sha256", NONE_HASH)
    request = Request("r", range(6), block_hasher=hasher)
    assert len(request.block_hashes) == 1
    for token in (6, 7):
        request.append_output_token(token)
    assert len(request.block_hashes) == 2 and request.all_token_ids == list(range(8))
    unhashed = Request("u", range(6))  # no hasher: prefix caching off
    for token in range(6, 14):
        unhashed.append_output_token(token)
    assert unhashed.block_hashes == [] and unhashed.output_token_ids == list(range(6, 14))


def test_token_views_agree_before_and_after_the_list_is_built() -> None:
    """`tokens_from` and `copy_token_ids` read prompt and outputs without building the list;
    once `all_token_ids` is read it is kept in step with every later output."""
    request = Request("r", range(5))
    assert request.tokens_from(0) is request.prompt_token_ids  # a new prompt: no copy
    assert request.tokens_from(3) == (3, 4)
    request.append_output_token(5)
    request.append_output_token_ids([6, 7])
    assert list(request.tokens_from(0)) == list(range(8))
    assert list(request.tokens_from(4)) == [4, 5, 6, 7]
    assert list(request.tokens_from(6)) == [6, 7] and list(request.tokens_from(8)) == []
    copied = request.copy_token_ids()
    assert copied == list(range(8)) and request.copy_token_ids() is not copied
    built = request.all_token_ids
    assert built == list(range(8)) and request.all_token_ids is built
    request.append_output_token(8)
    request.append_output_token_ids(9)
    assert built == list(range(10)) and request.tokens_from(7) == [7, 8, 9]
    assert request.copy_token_ids() == built and request.copy_token_ids() is not built
