"""`AsyncScheduler`: schedules step N+1 before step N's sampled tokens are known.

Each request about to produce a token gets an output *placeholder*; the next step treats the
placeholder as a token already present. When the real tokens arrive they replace placeholders,
and only then are the request's newly full blocks cached (their content is known).

With speculative decoding the drafts for step N+1 are not known when it is scheduled either:
such a request gets `num_spec_tokens` placeholder drafts (-1), whose slots step N+1 reserves;
the worker fills in the real draft ids.
"""

from __future__ import annotations

from impl.sched.output import (
    PLACEHOLDER_DRAFT,
    EngineCoreOutput,
    ModelRunnerOutput,
    SchedulerOutput,
)
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler


class AsyncScheduler(Scheduler):
    def _update_after_schedule(self, output: SchedulerOutput) -> None:
        super()._update_after_schedule(output)
        for req_id, num in output.num_scheduled_tokens.items():
            request = self.requests[req_id]
            request.num_inflight_tokens += num
            drafts = output.scheduled_spec_decode_tokens.get(req_id, ())
            if request.num_computed_tokens == (request.num_tokens + len(drafts)
                                               + request.num_output_placeholders):
                # This step completes the request's input: it will sample a token. With a
                # grammar and a step already in flight, the mask must wait for that step.
                if request.grammar is not None and request.num_output_placeholders > 0:
                    output.pending_structured_output_tokens = True
                request.num_output_placeholders += 1 + len(drafts)
                if self.num_spec_tokens:
                    request.spec_token_ids = [PLACEHOLDER_DRAFT] * self.num_spec_tokens

    def update_from_output(self, scheduler_output: SchedulerOutput,
                           model_runner_output: ModelRunnerOutput) -> list[EngineCoreOutput]:
        requests = self.requests
        for req_id, num in scheduler_output.num_scheduled_tokens.items():
            request = requests.get(req_id)
            if request is not None:
                request.num_inflight_tokens = max(0, request.num_inflight_tokens - num)
        return super().update_from_output(scheduler_output, model_runner_output)

    def _preempt_request(self, request: Request) -> None:
        super()._preempt_request(request)
        request.num_inflight_tokens = 0

    def _update_request_with_output(self, request: Request,
                                    new_token_ids: list[int]) -> tuple[list[int], bool]:
        status_before = request.status
        num_sampled = len(new_token_ids)
        new_token_ids, stopped = super()._update_request_with_output(request, new_token_ids)
        if self.behaviour.cache_verified_blocks_on_output:
            # 0.33: every sampled token resolves a placeholder, kept or trimmed by a stop; the
            # blocks are cached by `_cache_verified_blocks`, after the stop's trim.
            if request.num_output_placeholders > 0:
                request.num_output_placeholders -= num_sampled
                assert request.num_output_placeholders >= 0
            return new_token_ids, stopped
        request.num_output_placeholders -= len(new_token_ids)
        assert request.num_output_placeholders >= 0
        if status_before == RequestStatus.RUNNING:
            self.kv_cache_manager.cache_blocks(
                request, request.num_computed_tokens - request.num_output_placeholders)
        return new_token_ids, stopped
