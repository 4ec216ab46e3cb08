"""`FakeRunner`: plays the model runner (and drafter) for one system, using the token model.

It keeps what a real runner keeps per request: how many tokens it knows (prompt plus every
token it has sampled), its verification-step count and its latest drafts. A scheduled request
samples only when the step reaches the end of what the runner knows, so partial prefill chunks
and re-prefills after a preemption sample nothing, as on a GPU. Positions come from the runner's
own count, not from the scheduler's optimistic `num_computed_tokens`, which under async
scheduling with speculative decoding runs ahead of the truth until rejections are applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.sched.token_model import TokenModel
from conformance.systems.protocol import RunnerOutput, Scheduled
from workloads.model import Workload

STALE_DRAFT = 1
"""The token proposed for a request that finished in the step being drafted (any value would do:
the scheduler must never see it)."""


@dataclass(slots=True)
class _RequestState:
    prompt_len: int
    known: int
    verify_steps: int = 0
    drafts: list[int] = field(default_factory=list)


class FakeRunner:
    def __init__(self, workload: Workload, async_scheduling: bool) -> None:
        self.model = TokenModel(workload)
        self.num_spec_tokens = workload.config.num_spec_tokens
        self.async_scheduling = async_scheduling
        self.pooling = workload.config.runner == "pooling"
        self._state: dict[str, _RequestState] = {}

    def execute(self, scheduled: Scheduled, drafts_resolved: bool = False) -> RunnerOutput:
        """Run one scheduled step: sampled tokens per request, in batch order.
        `drafts_resolved`: async scheduling, but the step's drafts are real ids (a deferred
        step's, `Driver._async_body`), -1 where the grammar rejected one."""
        computed: dict[str, int] = {}
        for new in scheduled.new_reqs:
            computed[new.req_id] = new.num_computed_tokens
            state = self._state.get(new.req_id)
            if state is None or state.prompt_len != new.prompt_len:
                # A new request, or a streaming session's next part (its prompt has grown by
                # its kept outputs and the part; its outputs count from 0 again).
                self._state[new.req_id] = _RequestState(new.prompt_len, new.prompt_len)
            else:
                state.drafts = []
        for cached in scheduled.cached_reqs:
            computed[cached.req_id] = cached.num_computed_tokens
            if cached.resumed:
                self._state[cached.req_id].drafts = []
        if self.pooling:  # pooled output once the prompt is computed, never a token
            return RunnerOutput(
                tuple(rid for rid, _ in scheduled.num_scheduled_tokens),
                tuple(() for _ in scheduled.num_scheduled_tokens),
                pooled=tuple(rid for rid, num in scheduled.num_scheduled_tokens
                             if computed[rid] + num >= self._state[rid].prompt_len))
        spec = dict(scheduled.spec_tokens)
        req_ids: list[str] = []
        sampled: list[tuple[int, ...]] = []
        for rid, num_tokens in scheduled.num_scheduled_tokens:
            req_ids.append(rid)
            sampled.append(self._sample(rid, computed[rid], num_tokens, spec.get(rid, ()),
                                        drafts_resolved))
        return RunnerOutput(tuple(req_ids), tuple(sampled))

    def _sample(self, rid: str, start: int, num_tokens: int, spec: tuple[int, ...],
                drafts_resolved: bool) -> tuple[int, ...]:
        state = self._state.get(rid)
        if state is None:
            # Finished by the step applied just before this deferred one ran: the scheduler
            # drops whatever it would sample.
            return ()
        if start + num_tokens - len(spec) < state.known:
            return ()  # a prefill chunk that does not reach the end: nothing is sampled
        accepted = 0
        if spec:
            valid = self._valid_drafts(state, spec, drafts_resolved)
            planned = self.model.accepted(rid, state.verify_steps, self.num_spec_tokens)
            accepted = min(planned, valid)
            state.verify_steps += 1
        first = state.known - state.prompt_len
        tokens = tuple(self.model.token(rid, first + j) for j in range(accepted + 1))
        state.known += len(tokens)
        state.drafts = []
        if self.async_scheduling and self.num_spec_tokens:
            state.drafts = self._propose(rid, state)
        return tokens

    def _valid_drafts(self, state: _RequestState, spec: tuple[int, ...],
                      drafts_resolved: bool) -> int:
        """Drafts that are real: sync schedulers hold the drafts themselves (-1 marks padding),
        so do async ones for a deferred step; otherwise async ones hold placeholders only, and
        the runner's own drafts are the real ones."""
        if self.async_scheduling and not drafts_resolved:
            return min(len(spec), len(state.drafts))
        valid = 0
        while valid < len(spec) and spec[valid] >= 0:
            valid += 1
        return valid

    def _propose(self, rid: str, state: _RequestState) -> list[int]:
        start = state.known - state.prompt_len
        planned = self.model.accepted(rid, state.verify_steps, self.num_spec_tokens)
        return self.model.draft(rid, start, self.num_spec_tokens, planned)

    def take_drafts(self, output: RunnerOutput) -> list[tuple[str, list[int]]]:
        """Sync spec decode: drafts for every request scheduled in `output` (post_step).

        A request that sampled gets real proposals. One still mid-prefill gets proposals too,
        although a real drafter has none for it: the scheduler must drop drafts offered to a
        prefilling request, and offering them is how the harness checks that it does. So does
        one that finished in this very step: the engine's drafter runs over the whole batch
        before the scheduler's update is known, and the scheduler must skip drafts for a
        request it no longer has (and go on to the next)."""
        drafts = []
        for rid, tokens in zip(output.req_ids, output.sampled_token_ids, strict=True):
            state = self._state.get(rid)  # None: it finished in this very step
            if state is None:
                drafts.append((rid, [STALE_DRAFT] * self.num_spec_tokens))
                continue
            proposal = self._propose(rid, state)
            if tokens:
                state.drafts = proposal
            drafts.append((rid, list(proposal)))
        return drafts

    def drafts_for(self, scheduled: Scheduled) -> list[tuple[str, list[int]]]:
        """Async spec decode: the drafter's latest tokens for the requests `scheduled` holds
        placeholder drafts for (what the worker hands a deferred step)."""
        return [(rid, list(self._state[rid].drafts)) for rid, _ in scheduled.spec_tokens
                if rid in self._state and self._state[rid].drafts]

    def forget(self, request_id: str) -> None:
        """The request finished or was aborted; nothing more will be scheduled for it."""
        self._state.pop(request_id, None)
