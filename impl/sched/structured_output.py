"""The scheduler's side of structured output (`impl.sched.grammar` says what a grammar is).

Three touch points: admission promotes a request whose grammar has compiled (or notes one whose
grammar failed, to finish it with an error after the step); `get_grammar_bitmask` names, in
batch order, the scheduled requests whose next token the grammar must mask, and how many of
each one's drafts the mask covers; and drafts are trimmed at the first token the grammar
rejects before the next step schedules them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mypy_extensions import trait

from impl.sched.grammar import GrammarState
from impl.sched.output import PLACEHOLDER_DRAFT, DraftTokenIds, SchedulerOutput
from impl.sched.request import Request, RequestStatus
from impl.sched.state import SchedulerState


@dataclass(frozen=True, slots=True)
class GrammarOutput:
    """The grammar bitmask's rows for one step: request ids in batch order, and per request
    the drafts before the first padding slot (the mask covers those, plus the bonus token)."""

    structured_output_request_ids: tuple[str, ...]
    num_acceptable_drafts: tuple[int, ...]


@trait
class StructuredOutput(SchedulerState):
    def _grammar_ready(self, request: Request) -> bool:
        """Admission reached a request waiting for its grammar: promote it if the grammar
        compiled (it is then admitted like any waiting request), else pass over it; a failed
        compile is finished with an error when the step's output is applied."""
        grammar = request.grammar
        assert grammar is not None
        if grammar.state == GrammarState.READY:
            request.status = RequestStatus.WAITING
            return True
        if grammar.state == GrammarState.FAILED:
            self.grammar_compile_error_reqs.add(request.request_id)
        return False

    def get_grammar_bitmask(self, output: SchedulerOutput) -> GrammarOutput | None:
        """The requests of `output` the sampler masks: those with a grammar whose step reaches
        the end of what they know (a prefill chunk samples nothing). None: no such request."""
        ids: list[str] = []
        acceptable: list[int] = []
        for req_id in output.num_scheduled_tokens:
            request = self.requests.get(req_id)
            if request is None or request.grammar is None or request.is_prefill_chunk:
                continue
            ids.append(req_id)
            drafts = output.scheduled_spec_decode_tokens.get(req_id, ())
            unpadded = 0
            while unpadded < len(drafts) and drafts[unpadded] >= 0:
                unpadded += 1
            acceptable.append(unpadded)
        if not ids:
            return None
        return GrammarOutput(tuple(ids), tuple(acceptable))

    def update_draft_token_ids_in_output(self, draft_token_ids: DraftTokenIds,
                                         output: SchedulerOutput) -> None:
        """Async scheduling: the drafts of a step whose sampling waited for the step before
        (`pending_structured_output_tokens`) replace its placeholder drafts, cut to as many as
        were scheduled, trimmed by the grammar and padded back with -1; the pads are counted
        (`num_invalid_spec_tokens`: the verifier rejects them, the stats leave them out)."""
        invalid: dict[str, int] = {}
        scheduled = output.scheduled_spec_decode_tokens
        for req_id, drafts in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids,
                                  strict=True):
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            placeholders = scheduled.get(req_id)
            if not placeholders:
                continue
            width = len(placeholders)
            kept = self._grammar_drafts(request, list(drafts[:width]))
            if len(kept) < width:
                invalid[req_id] = width - len(kept)
                kept.extend([PLACEHOLDER_DRAFT] * (width - len(kept)))
            scheduled[req_id] = kept
        output.num_invalid_spec_tokens = invalid

    def _grammar_drafts(self, request: Request, drafts: list[int]) -> list[int]:
        """The drafts a request keeps: all of them, or with a grammar those before the first
        token it rejects."""
        grammar = request.grammar
        return drafts if grammar is None else grammar.valid_prefix(drafts)
