"""The `SchedulerOutput` of a finished `StepPlan`: what the model runner is told about a step.

New requests carry their whole prompt and blocks; requests it has seen carry only what changed
(new block ids, computed and output token counts), except that a request it did not see in the
previous step (resumed, or skipped a step) gets its full token list again, because the runner
may have dropped its state.
"""

from __future__ import annotations

from impl.core.kv_cache_manager import KVCacheBlocks
from impl.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from impl.sched.request import Request
from impl.sched.step_plan import StepPlan
from vtwin.errors import IntegrityError


def make_output(plan: StepPlan, max_num_scheduled_tokens: int, finished_req_ids: set[str],
                prev_step_scheduled_req_ids: set[str]) -> SchedulerOutput:
    total = 0  # a loop: mypyc calls `sum` by name, a generic call every step
    for num_tokens in plan.num_scheduled.values():
        total += num_tokens
    if total > max_num_scheduled_tokens or plan.token_budget < 0:
        raise IntegrityError(f"scheduler: {total} tokens scheduled, budget "
                             f"{max_num_scheduled_tokens} (left {plan.token_budget})")
    return SchedulerOutput(
        scheduled_new_reqs=[
            NewRequestData(r.request_id, r.prompt_token_ids,
                           plan.new_blocks_of[r.request_id].get_block_ids(),
                           r.num_computed_tokens, r.lora_name, r.replay_start)
            for r in plan.scheduled_new
        ],
        scheduled_cached_reqs=make_cached_request_data(
            plan.scheduled_running, plan.scheduled_resumed, plan.new_blocks_of,
            prev_step_scheduled_req_ids),
        num_scheduled_tokens=plan.num_scheduled,
        total_num_scheduled_tokens=total,
        scheduled_spec_decode_tokens=plan.spec_tokens,
        finished_req_ids=finished_req_ids,
        preempted_req_ids={r.request_id for r in plan.preempted},
        num_common_prefix_blocks=[],  # cascade attention is gone upstream: always empty
        has_sync_kv_loads=plan.has_sync_kv_loads,
    )


def make_cached_request_data(running: list[Request], resumed: list[Request],
                             new_blocks_of: dict[str, KVCacheBlocks],
                             prev_step_scheduled_req_ids: set[str]) -> CachedRequestData:
    data = CachedRequestData()
    num_running = len(running)
    for position, request in enumerate(running + resumed):
        req_id = request.request_id
        data.req_ids.append(req_id)
        if position >= num_running:
            data.resumed_req_ids.add(req_id)
        if req_id not in prev_step_scheduled_req_ids:
            data.all_token_ids[req_id] = request.copy_token_ids()
        data.new_block_ids.append(new_blocks_of[req_id].get_block_ids_or_none())
        data.num_computed_tokens.append(request.num_computed_tokens)
        data.num_output_tokens.append(request.num_output_tokens
                                      + request.num_output_placeholders)
    return data
