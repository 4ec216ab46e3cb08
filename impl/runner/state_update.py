"""Applying a `SchedulerOutput` to the runner's request states and persistent batch.

Before a step's inputs are built the batch must hold exactly the scheduled requests: finished
ones are forgotten, preempted and unscheduled ones leave the batch (their `RequestState` stays),
new ones enter, and cached ones advance: new block ids are appended, or, for a resumed request,
replace its block table. Token ids arrive in full only for requests the runner did not see in the
previous step (`all_token_ids`); otherwise the runner already appended the tokens it sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from impl.runner.input_batch import InputBatch
from impl.runner.request_state import RequestState
from impl.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

StateFactory = Callable[[NewRequestData], RequestState]


def apply_scheduler_output(output: SchedulerOutput, requests: dict[str, RequestState],
                           batch: InputBatch, new_state: StateFactory) -> None:
    for req_id in output.finished_req_ids:
        requests.pop(req_id, None)
        batch.remove_request(req_id)
    for req_id in output.preempted_req_ids or ():
        batch.remove_request(req_id)
    scheduled = output.num_scheduled_tokens
    for req_id in batch.req_ids:
        if req_id not in scheduled:
            batch.remove_request(req_id)
    for new in output.scheduled_new_reqs:
        state = new_state(new)
        requests[new.req_id] = state
        batch.remove_request(new.req_id)
        batch.add_request(state)
    _apply_cached(output.scheduled_cached_reqs, requests, batch)
    batch.condense()


def _apply_cached(cached: CachedRequestData, requests: dict[str, RequestState],
                  batch: InputBatch) -> None:
    for index, req_id in enumerate(cached.req_ids):
        state = requests.get(req_id)
        if state is None:
            raise ValueError(f"scheduler output: cached request {req_id!r} is unknown to the "
                             "runner")
        state.num_computed_tokens = cached.num_computed_tokens[index]
        full_tokens = cached.all_token_ids.get(req_id)
        if full_tokens is not None:
            state.output_token_ids = list(full_tokens[len(state.prompt_token_ids):])
        new_blocks = cached.new_block_ids[index]
        resumed = req_id in cached.resumed_req_ids
        if resumed:
            groups = len(state.block_ids)
            state.block_ids = tuple(list(ids) for ids in new_blocks or [[]] * groups)
        elif new_blocks is not None:
            for group_ids, ids in zip(state.block_ids, new_blocks, strict=True):
                group_ids.extend(ids)
        row = batch.req_id_to_index.get(req_id)
        if row is None:
            batch.add_request(state)
            continue
        batch.num_computed_tokens[row] = state.num_computed_tokens
        if resumed:
            batch.block_table.add_row(state.block_ids, row)
        elif new_blocks is not None:
            batch.block_table.append_row(new_blocks, row)
        if full_tokens is not None:
            _rewrite_tokens(batch, row, full_tokens)


def _rewrite_tokens(batch: InputBatch, row: int, token_ids: Sequence[int]) -> None:
    batch.token_ids[row, :len(token_ids)] = token_ids
    batch.num_tokens[row] = len(token_ids)
