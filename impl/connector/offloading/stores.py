"""`StoreOffers`: each step, every scheduled or just-finished request offers the chunks it
has computed, allocated and keyed but not offered yet, and gets one store job. A request's own
`max_offload_tokens` caps what it may store (`_offloadable`).

How far a request has computed: its computed tokens plus those scheduled this step; an aborted
request's computed tokens; a finished request's tokens but the last sampled one (its KV is
never computed). Prompt tokens only by default. The manager picks slots and may evict; when it
cannot make room the offer is refused whole and made again next step. A chunk of several GPU
blocks is offered by its last block, and copied whole.

A sliding window offers only the chunks that can serve a hit (`windows.store_mask`: its tail
before each aligned boundary and before the request's last segment end, or under sparse
retention before the replay boundary and a shared prefix's junction); once a request has
finished past its prompt, its last partial segment is looked at again. A windowed group's
blocks are watched from the store on (the window frees them while the request runs), the
others only once the request has finished.

A mamba 'align' group offers no chunks here: the cache offers each state it keys with its
block (`BoundaryState`), and each one that ends a chunk is stored in a job of its own, made
before the chunk stores (`_boundary_store_jobs`).
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from impl.behaviour import Behaviour
from impl.connector.offloading.events import ConnectorEvents
from impl.connector.offloading.job_book import JobBook
from impl.connector.offloading.jobs import GPUBlocks, JobStatus, TransferJob
from impl.connector.offloading.keys import OffloadKey
from impl.connector.offloading.request_state import GroupShape, GroupState, RequestOffload
from impl.connector.offloading.windows import store_mask
from impl.connector.types import OffloadingSettings
from impl.core.single_type_manager import reachable_boundaries
from impl.core.specs import MambaSpec, SlidingWindowSpec

if TYPE_CHECKING:
    from impl.core.mamba_boundaries import BoundaryState
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


class StoreOffers(JobBook):
    settings: OffloadingSettings
    shapes: tuple[GroupShape, ...]
    blocks_per_chunk: int
    retention_interval: int | None
    alignment_tokens: int | None
    behaviour: Behaviour
    events: ConnectorEvents

    def _store_jobs(self, output: SchedulerOutput) -> dict[int, TransferJob]:
        jobs: dict[int, TransferJob] = {}
        per_chunk = self.blocks_per_chunk
        scheduled = output.num_scheduled_tokens
        for req_id in chain(scheduled, output.finished_req_ids):
            state = self.requests.get(req_id)
            if state is None:
                continue
            request = state.request
            if request.is_finished() and request.get_finished_reason() == "abort":
                num_tokens = request.num_computed_tokens
            elif request.is_finished():
                # The last sampled token's KV is never computed: a chunk ending there is not.
                num_tokens = max(request.num_prompt_tokens, request.num_tokens - 1)
            else:
                num_tokens = request.num_computed_tokens + scheduled[req_id]
            num_tokens = self._offloadable(request, num_tokens)
            offered: list[OffloadKey] = []
            ranges: list[tuple[int, int]] = []
            prompt_chunks_tokens = self._offloadable(request, request.num_prompt_tokens)
            for shape, group in zip(self.shapes, state.groups, strict=True):
                span = self._store_range(state, shape, group, num_tokens, prompt_chunks_tokens)
                ranges.append((span.start, span.stop))
                if not isinstance(shape.spec, MambaSpec):  # its states: `_boundary_store_jobs`
                    offered.extend(self._offered(
                        state, shape, group, span, prompt_chunks_tokens // shape.tokens_per_chunk))
            if not offered:
                state.advance_stored(self.shapes, num_tokens, per_chunk)
                continue
            plan = self.manager.prepare_store(offered, state.context)
            if plan is None:
                continue  # no room: offered again next step
            if not plan.keys:
                state.advance_stored(self.shapes, num_tokens, per_chunk)
                continue
            to_store = set(plan.keys)
            block_ids: list[int] = []
            fenced: list[int] = []  # windowed groups' blocks: watched from the start
            deferred: list[int] = []  # the others: watched once the request has finished
            sizes: list[int] = []
            starts: list[int] = []
            for shape, group, (start, end) in zip(self.shapes, state.groups, ranges,
                                                  strict=True):
                first: int | None = None
                count = 0
                for chunk, key in enumerate(group.keys[start:end], start):
                    if key not in to_store:
                        continue
                    self.events.record_store(request, shape, chunk, key)
                    for index in range(chunk * per_chunk, (chunk + 1) * per_chunk):
                        if group.block_ids[index] == 0:
                            continue
                        if first is None:
                            first = index
                        block_ids.append(group.block_ids[index])
                        (deferred if shape.window is None else fenced).append(
                            group.block_ids[index])
                        count += 1
                sizes.append(count)
                starts.append(first or 0)
                group.next_stored_chunk = max(group.next_stored_chunk, end)
            job_id = self._new_job_id()
            state.jobs.add(job_id)
            for block_id in fenced:
                self.watched_blocks.setdefault(block_id, set()).add(job_id)
            # A copy of the set, as upstream keeps one: a set copied from a set is laid out
            # anew, and the manager announces the chunks in the copy's iteration order.
            self.jobs[job_id] = JobStatus(req_id, 1, set(to_store), is_store=True,
                                          deferred_fence=tuple(deferred), fence=tuple(fenced))
            jobs[job_id] = TransferJob(req_id, GPUBlocks(tuple(block_ids), tuple(sizes),
                                                         tuple(starts)), plan.chunk_ids)
            if request.is_finished():
                for block_id in deferred:
                    self.watched_blocks.setdefault(block_id, set()).add(job_id)
                    if block_id in self.batch_allocated:
                        self.batch_flush.add(job_id)
        return jobs

    def _boundary_store_jobs(self, output: SchedulerOutput) -> dict[int, TransferJob]:
        """One store job per mamba state the cache keyed this step (`output.boundary_states`,
        by request in the order first offered), if it ends on one of its group's chunks
        within what the request may offload. A state's block leaves the table as the request
        moves on, so it is watched from the store on."""
        jobs: dict[int, TransferJob] = {}
        by_request: dict[str, list[BoundaryState]] = {}
        for offer in output.boundary_states:
            by_request.setdefault(offer.request_id, []).append(offer)
        for req_id, offers in by_request.items():
            state = self.requests.get(req_id)
            if state is None:
                continue
            request = state.request
            limit = self._offloadable(request, request.num_tokens)
            for offer in offers:
                shape = self.shapes[offer.group]
                if offer.block_id == 0 or offer.boundary > limit \
                        or offer.boundary % shape.tokens_per_chunk:
                    continue
                key = state.chunk_key(shape, offer.boundary)
                plan = self.manager.prepare_store([key], state.context)
                if plan is None or not plan.keys:
                    continue
                job_id = self._new_job_id()
                state.jobs.add(job_id)
                self.watched_blocks.setdefault(offer.block_id, set()).add(job_id)
                self.jobs[job_id] = JobStatus(req_id, 1, {key}, is_store=True,
                                              fence=(offer.block_id,))
                sizes = [0] * len(self.shapes)
                starts = [0] * len(self.shapes)
                sizes[offer.group] = 1
                starts[offer.group] = offer.boundary // shape.tokens_per_block - 1
                jobs[job_id] = TransferJob(req_id, GPUBlocks((offer.block_id,), tuple(sizes),
                                                             tuple(starts)), plan.chunk_ids)
        return jobs

    def _offloadable(self, request: Request, num_tokens: int) -> int:
        """How many of the request's first `num_tokens` tokens it may store: not past its
        tokens, its own `max_offload_tokens`, nor (prompt only, the default) its prompt."""
        num = min(num_tokens, request.num_tokens)
        limits = request.offload_limits
        if limits is not None and limits.max_offload_tokens is not None:
            num = min(num, limits.max_offload_tokens)
        if self.settings.offload_prompt_only:
            num = min(num, request.num_prompt_tokens)
        return num

    def _store_range(self, state: RequestOffload, shape: GroupShape, group: GroupState,
                     num_tokens: int, prompt_tokens: int) -> range:
        """The chunks of one group a store looks at: from the group's cursor to what is
        computed, allocated and keyed. Once a request has finished past its prompt, a
        sliding window also looks again at the last partial segment (whose tail the prompt's
        end made worth storing before: `_offered` leaves those chunks out)."""
        per_chunk = self.blocks_per_chunk
        end = state.storable_chunks(shape, group, num_tokens, per_chunk)
        start = group.next_stored_chunk
        segment = self._final_tail_segment_blocks(shape)
        if (state.request.is_finished() and segment is not None
                and end != prompt_tokens // shape.tokens_per_chunk
                and self.retention_interval is None):
            horizon = end * per_chunk
            start = min(start, (horizon - horizon % segment) // per_chunk)
        return range(start, end)

    def _final_tail_segment_blocks(self, shape: GroupShape) -> int | None:
        """A sliding window's segment in blocks, when hits align to whole blocks of it."""
        alignment = self.alignment_tokens
        if (alignment is None or not isinstance(shape.spec, SlidingWindowSpec)
                or alignment % shape.tokens_per_block):
            return None
        return alignment // shape.tokens_per_block

    def _offered(self, state: RequestOffload, shape: GroupShape, group: GroupState,
                 span: range, prompt_chunks: int) -> list[OffloadKey]:
        """The chunks of `span` a store offers: allocated (the last block of the chunk is
        not blank) and able to serve a hit (`windows.store_mask`)."""
        if not span:
            return []
        per_chunk = self.blocks_per_chunk
        request = state.request
        finished = request.is_finished()
        if self.retention_interval is not None:
            horizon: int | None = None
        elif finished:
            horizon = span.stop
        else:
            horizon = prompt_chunks if span.stop <= prompt_chunks else None
        mask = self._mask(shape, span, horizon, request)
        again = (finished and span.stop != prompt_chunks and self.retention_interval is None
                 and self._final_tail_segment_blocks(shape) is not None)
        prompt_mask = self._mask(shape, span, prompt_chunks, request) if again else None
        offered: list[OffloadKey] = []
        for chunk in span:
            if group.block_ids[chunk * per_chunk + per_chunk - 1] == 0:
                continue
            blocks = range((chunk - span.start) * per_chunk, (chunk - span.start + 1) * per_chunk)
            if again and chunk < group.next_stored_chunk and (
                    prompt_mask is None or any(prompt_mask[b] for b in blocks)):
                continue  # stored (or offered) when the prompt ended
            if mask is not None and not any(mask[b] for b in blocks):
                continue
            if self.behaviour.offloading_skips_chunks_with_holes and any(
                    group.block_ids[span.start * per_chunk + b] == 0
                    and (mask is None or mask[b]) for b in blocks):
                continue  # a hole that could serve a hit: the copy would be incomplete
            offered.append(group.keys[chunk])
        return offered

    def _mask(self, shape: GroupShape, span: range, horizon: int | None,
              request: Request) -> list[bool] | None:
        per_chunk = self.blocks_per_chunk
        boundaries = reachable_boundaries(request)  # (no EAGLE with a connector)
        return store_mask(shape.spec, span.start * per_chunk, span.stop * per_chunk,
                          alignment_tokens=self.alignment_tokens,
                          final_end_block=None if horizon is None else horizon * per_chunk,
                          retention_interval=self.retention_interval, boundaries=boundaries)

