"""Admission rules of `Scheduler`, kept apart so the scheduler reads as its phases.

`_loras_in_use` is the `max_loras` limit admission stays within; `_uniform_decode_padding`
pads an admitted decode to the spec-decode batch's uniform width; the `_check_`/`_fail_`
methods stop where upstream asserts (`ReleaseCheckFailed`). All are methods of the scheduler
(a mixin), reading its settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from mypy_extensions import trait

from impl.sched.state import SchedulerState
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from impl.sched.request import Request
    from impl.sched.step_plan import StepPlan


@trait
class AdmissionRules(SchedulerState):

    def _loras_in_use(self, plan: StepPlan) -> set[str] | None:
        """The adapters admission must stay within (`max_loras`; None: no limit). 0.32 counts
        the adapters of running requests scheduled in this step, 0.33 those of every running
        request, since one not scheduled now can join a later batch."""
        if not self.scheduler_config.max_loras:
            return None
        source = (self.running if self.behaviour.lora_limit_counts_running
                  else plan.scheduled_running)
        return {r.lora_name for r in source if r.lora_name is not None}

    def _check_running_loras(self, plan: StepPlan) -> None:
        """Raise `ReleaseCheckFailed('lora-limit')` when the running phase scheduled more
        adapters than `max_loras`. Upstream asserts this at the same point (the model runner
        can hold only `max_loras` adapters in a batch). Under 0.33's admission (every running
        request counted) it cannot happen; 0.32's admission lets a waiting request take the slot
        of a running one left out of its step, and the next step that schedules both stops:
        the twin stops there too, with upstream."""
        limit = self.scheduler_config.max_loras
        if not limit:
            return
        adapters = {r.lora_name for r in plan.scheduled_running if r.lora_name is not None}
        if len(adapters) > limit:
            raise ReleaseCheckFailed("lora-limit", (
                f"the running phase scheduled adapters {sorted(adapters)}, more than "
                f"max_loras={limit} ({self.behaviour.release} admission)"))

    def _fail_empty_admission(self, request: Request, num_computed: int) -> NoReturn:
        """Raise `ReleaseCheckFailed('empty-admission')`: a waiting request reached with every
        token computed has nothing to schedule, which upstream asserts at the same point. 0.32
        reaches it with a streaming session whose turn ended on a stop that trimmed verified
        drafts: the computed count stays past the trimmed tokens, and a next part of one token
        is then computed already (`conformance/upstream_bugs/session-trimmed-drafts-032.jsonl`;
        0.33 takes trimmed tokens back, `cache_verified_blocks_on_output`)."""
        raise ReleaseCheckFailed("empty-admission", (
            f"waiting request {request.request_id!r} has no token to compute "
            f"({num_computed} of its {request.num_tokens} computed; "
            f"{self.behaviour.release})"))

    def _uniform_decode_padding(self, num_computed: int, num_new: int) -> int:
        """Placeholder drafts for an admitted request that needs just its last token (a resumed
        decode, or a prompt whose all but one token hit the cache): padded to 1 + k tokens it
        looks like every other decode of a spec-decode batch, which keeps the batch uniform
        (upstream does this to stay on its full CUDA graph). All or nothing: padding applies
        only when the padded positions plus the token sampled after them fit `max_model_len`.

        The caller checks the step-level conditions: no running request in this step is still
        prefilling, and the step already scheduled a running request or this one has computed
        tokens (a bare 1-token prompt alone is a prefill, not a decode)."""
        k = self.num_spec_tokens
        if not k or num_new != 1:
            return 0
        return k if num_computed + 1 + k + 1 <= self.max_model_len else 0


def reserve_prefill_lookahead(request: Request, num_computed: int, num_new: int,
                              lookahead: int) -> int:
    """The chunk cut so it never ends within `lookahead` tokens of the prefill's end. At a
    chunk boundary a chain of MTP modules reads the next `lookahead` known prompt tokens as
    its draft inputs; a boundary closer to the end would make the later modules draft from
    sampled tokens and keep that KV. So a chunk either finishes the prefill or leaves at least
    `lookahead` tokens for the next (an EAGLE head's look-ahead of 1 never cuts)."""
    remaining = request.num_tokens - num_computed - num_new
    if 0 < remaining < lookahead:
        num_new -= lookahead - remaining
    return max(num_new, 0)
