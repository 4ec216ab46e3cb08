"""A shortest-job-first scheduler plugin for vLLM: the kind of `--scheduler-cls` a user writes.

It subclasses upstream vLLM's V1 `Scheduler` and changes one thing: before each step the
waiting queue is reordered so that the request with the least work left goes first (prompt
tokens not computed yet plus tokens still to generate; ties keep arrival order). Everything
else (the token budget, preemption, the KV cache) is upstream's. Under the priority policy the
queue orders itself by priority and this reordering has no effect, so it targets FCFS.

Put it under test against the scheduler it came from, on vtwin's workloads::

    vtwin drift --left upstream --right 'upstream+sched=examples.sjf_scheduler:SJFScheduler'
    vtwin conform --system 'upstream+sched=examples.sjf_scheduler:SJFScheduler' \\
        --against upstream --workload decode-heavy

(run from the repository root, or anywhere this module is importable; a release works too:
``vllm==0.33.0+sched=examples.sjf_scheduler:SJFScheduler``). It drives vLLM only through the
public attributes of its request objects and its waiting queue's own methods.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


def work_left(request: Any) -> int:
    """Tokens this request still needs: the prompt not computed yet plus the outputs to come."""
    prefill = max(request.num_prompt_tokens - request.num_computed_tokens, 0)
    return int(prefill + request.max_tokens - request.num_output_tokens)


class SJFScheduler(Scheduler):  # type: ignore[misc]  # vLLM is untyped here
    """Upstream's scheduler, serving the shortest waiting job first."""

    def schedule(self) -> Any:
        self.shortest_first()
        return super().schedule()

    def shortest_first(self) -> None:
        waiting = list(self.waiting)
        ordered = sorted(waiting, key=work_left)  # stable: equal jobs keep arrival order
        if ordered != waiting:
            self.waiting.remove_requests(waiting)
            for request in ordered:
                self.waiting.add_request(request)
