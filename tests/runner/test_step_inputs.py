"""Per-step inputs (positions, query start locations, sequence lengths, slot mappings, logits
rows) and applying scheduler outputs to the runner's states (new, cached, resumed, finished)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.runner.input_batch import InputBatch  # noqa: E402
from impl.runner.request_state import RequestState  # noqa: E402
from impl.runner.sampling_params import SamplingParams  # noqa: E402
from impl.runner.state_update import apply_scheduler_output  # noqa: E402
from impl.runner.step_inputs import build_step_inputs  # noqa: E402
from impl.sched.output import CachedRequestData, NewRequestData, SchedulerOutput  # noqa: E402

CPU = torch.device("cpu")


def _state(req_id: str, tokens: list[int], blocks: list[int], computed: int) -> RequestState:
    return RequestState(req_id, tokens, [], (blocks,), computed, SamplingParams(), None)


def test_mixed_prefill_decode_and_spec_batch() -> None:
    batch = InputBatch(max_num_reqs=4, max_model_len=32, block_sizes=[4])
    batch.add_request(_state("a", list(range(100, 110)), [7, 3, 9], computed=4))  # last chunk
    batch.add_request(_state("b", list(range(200, 207)), [4, 8], computed=6))  # decode
    batch.add_request(_state("c", list(range(300, 320)), [1, 2], computed=0))  # first chunk
    batch.add_request(_state("d", list(range(400, 405)), [5, 6], computed=4))  # 2 drafts
    batch.write_drafts(3, [91, 92])
    inputs = build_step_inputs(batch, [6, 1, 8, 3], [0, 0, 0, 2], [0], CPU)
    assert inputs.positions.tolist() == ([4, 5, 6, 7, 8, 9] + [6] + list(range(8))
                                         + [4, 5, 6])
    assert inputs.input_ids.tolist() == (list(range(104, 110)) + [206]
                                         + list(range(300, 308)) + [404, 91, 92])
    (meta,) = inputs.metadata
    assert meta.query_start_loc.tolist() == [0, 6, 7, 15, 18]
    assert meta.seq_lens.tolist() == [10, 7, 8, 7]
    assert meta.query_lens_host == (6, 1, 8, 3) and meta.seq_lens_host == (10, 7, 8, 7)
    assert meta.slot_mapping.tolist() == ([3 * 4 + 0, 3 * 4 + 1, 3 * 4 + 2, 3 * 4 + 3,
                                           9 * 4 + 0, 9 * 4 + 1] + [8 * 4 + 2]
                                          + [4, 5, 6, 7, 8, 9, 10, 11] + [6 * 4, 25, 26])
    assert meta.block_table[:, :3].tolist() == [[7, 3, 9], [4, 8, 0], [1, 2, 0], [5, 6, 0]]
    assert inputs.num_logits == (1, 1, 0, 3)  # c is mid-prefill: nothing to sample
    assert inputs.logits_indices.tolist() == [5, 6, 15, 16, 17]


def test_sliding_window_reaches_the_metadata() -> None:
    batch = InputBatch(max_num_reqs=1, max_model_len=8, block_sizes=[4, 2])
    batch.add_request(RequestState("a", [1, 2, 3], [], ([1], [2, 3]), 0, SamplingParams(), None))
    inputs = build_step_inputs(batch, [3], [0], [0, 2], CPU)
    assert [m.sliding_window for m in inputs.metadata] == [0, 2]
    assert inputs.metadata[1].slot_mapping.tolist() == [4, 5, 6]


def _output(new: list[NewRequestData], cached: CachedRequestData, scheduled: dict[str, int],
            finished: set[str] | None = None, preempted: set[str] | None = None
            ) -> SchedulerOutput:
    return SchedulerOutput(new, cached, scheduled, sum(scheduled.values()), {},
                           finished or set(), preempted)


def _new_state(new: NewRequestData) -> RequestState:
    return RequestState(new.req_id, list(new.prompt_token_ids), [],
                        tuple(list(b) for b in new.block_ids), new.num_computed_tokens,
                        SamplingParams(), None)


def test_new_cached_unscheduled_resumed_finished() -> None:
    batch = InputBatch(max_num_reqs=4, max_model_len=32, block_sizes=[4])
    states: dict[str, RequestState] = {}
    apply_scheduler_output(_output(
        [NewRequestData("a", [1] * 6, ([1, 2],), 0), NewRequestData("b", [2] * 3, ([3],), 0)],
        CachedRequestData(), {"a": 6, "b": 3}), states, batch, _new_state)
    assert batch.req_ids == ["a", "b"]
    states["a"].output_token_ids.append(11)  # what the runner samples
    batch.append_tokens(0, [11])

    # b is not scheduled this step: it leaves the batch but keeps its state.
    apply_scheduler_output(_output([], CachedRequestData(
        req_ids=["a"], new_block_ids=[([5],)], num_computed_tokens=[6], num_output_tokens=[1]),
        {"a": 1}), states, batch, _new_state)
    assert batch.req_ids == ["a"] and "b" in states
    assert batch.block_table[0].row(0) == [1, 2, 5]
    assert int(batch.num_computed_tokens[0]) == 6

    # b comes back resumed (after a preemption): its token ids come in full, blocks replace.
    apply_scheduler_output(_output([], CachedRequestData(
        req_ids=["b"], resumed_req_ids={"b"}, all_token_ids={"b": [2, 2, 2, 12]},
        new_block_ids=[([8, 9],)], num_computed_tokens=[0], num_output_tokens=[1]),
        {"b": 4}, finished={"a"}), states, batch, _new_state)
    assert batch.req_ids == ["b"] and "a" not in states
    assert states["b"].output_token_ids == [12] and states["b"].block_ids == ([8, 9],)
    assert batch.block_table[0].row(0) == [8, 9]
    assert batch.token_ids[0, :4].tolist() == [2, 2, 2, 12]
    inputs = build_step_inputs(batch, [4], [0], [0], CPU)
    assert inputs.metadata[0].slot_mapping.tolist() == [32, 33, 34, 35]


def test_unknown_cached_request_is_an_error() -> None:
    batch = InputBatch(max_num_reqs=1, max_model_len=8, block_sizes=[4])
    with pytest.raises(ValueError, match="cached request 'x' is unknown"):
        apply_scheduler_output(_output([], CachedRequestData(
            req_ids=["x"], new_block_ids=[None], num_computed_tokens=[0],
            num_output_tokens=[0]), {"x": 1}), {}, batch, _new_state)
